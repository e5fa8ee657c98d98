"""The hang path's passes of the watchdog's tick: ``hang`` (HANG, SILENT)
and ``idle`` (the idle stall), each owning its detector and what it
remembers from tick to tick (docs/collector.md "Passes and rules").

The hang pass looks at the state's indexes first (which ranks' ops near the
timeout, which agents went quiet) and judges a full snapshot only then,
while a hang lasts, or when another pass wants one, so a tick's work does
not grow with the healthy ranks. Judging is ``diag.hang.decide``; what
follows a verdict (the line, the commands, hang.json) is the watchdog's
(``Watchdog.declare``). Ingest is held, in this pass alone, while an op
that just neared the timeout is judged and its line and commands go out.

Judging every rank costs seconds at 200,000 ranks, so the verdict is judged
ahead (``Ahead``): once the earliest op will cross the timeout within a
lead of about twice that cost, ``decide`` runs on the snapshot moved to
that moment, as if every report until then said what the last one of its
node did. It stands, and is declared when the moment comes, while the
state's ``mark`` says that held (no op started or ended, no rank exited,
nothing forgiven) and the same agents are quiet; anything else drops it
and the timeout's tick judges afresh, as before (docs/collector.md
"Judged ahead").
"""

from __future__ import annotations

import dataclasses
import logging
import time

from diag.collector import verdict
from diag.collector.config import Config
from diag.collector.pace import Pacer
from diag.collector.schedule import Pass, Tick
from diag.collector.state import PROGRESS_SLACK_S, JobState, Snapshot
from diag.hang.api import Findings, Limits
from diag.hang.decide import decide
from diag.hang.detector import ACTIVITY_SLACK_S, HangDetector, IdleDetector
from diag.hang.idle import find_idle
from diag.hang.silent import silent_agents

log = logging.getLogger("diag.collector")
# The index files ops by the second they started, and a later report may date
# a start a little earlier: look at ranks this much before the timeout.
INDEX_SLACK_S = 1.5
HOLD_FOR_S = INDEX_SLACK_S + 2.0   # the window's width, and a little: the ticks that may declare
PROBE_EVERY_S = 1.0   # the verdict rules' look while an op is waited on (probe_due)
# Judging ahead: the verdict is the op's state this long past its crossing
# (strictly past the timeout), and before this pass has timed a look of its
# own, one is taken to cost this much a rank (3-4 s at 200,000 ranks on the
# device host, docs/gpu-runs/h200x1/s24/).
AHEAD_PAST_S = 0.05
COST_PER_RANK_S = 20e-6


@dataclasses.dataclass
class _Look:
    """What the hang pass reads of the indexes, once a tick."""

    tick: Tick
    silent_after_s: float
    expired: set[int]            # ranks whose op nears the timeout
    quiet: set[int]              # agents quiet past --silent-after (silent candidates)
    probing: bool | None = None  # whether the verdict rules look this tick (worked out when asked)
    crossing: float | None = None   # when the earliest op nearing the timeout crosses it (HangPass.crossing)


@dataclasses.dataclass
class Ahead:
    """A verdict judged ahead of the timeout: ``findings`` at ``at`` (an op
    crossed it), on ``snap`` (its state's mark the one that must hold) with
    ``quiet`` agents quiet; it stands until ``until`` (the next op to cross)."""

    at: float
    findings: Findings
    snap: Snapshot
    quiet: set[int]
    until: float

    def view(self, now: float) -> Snapshot:
        """The snapshot it was judged on, moved to ``now``: ranks age, and
        every agent is taken to have reported as recently as when it was
        taken (what the mark and the quiet agents say still holds). Its
        entries are made already: the line and hang.json read them without
        parsing 25,000 reports again."""
        return moved(self.snap, now)


def moved(snap: Snapshot, now: float) -> Snapshot:
    """``snap`` as it would read at ``now`` were every report until then the
    same as its node's last, ages apart (judge_ahead, Ahead.view)."""
    later = now - snap.now
    return snap._replace(now=now, agents={n: a._replace(last_seen=a.last_seen + later)
                                          for n, a in snap.agents.items()})


class HangPass(Pass):
    name = "hang"

    def __init__(self, config: Config, state: JobState, pacer: Pacer, actions) -> None:
        """``actions``: the watchdog (declare, ingest_held, say)."""
        self._config, self._state, self._pacer, self._actions = config, state, pacer, actions
        self.detector = HangDetector()
        self.probe_at, self.probe_cost = float("-inf"), 0.0   # the verdict rules' last look, and its cost
        self.expired_since: dict[int, float] = {}   # rank -> when its op entered the index's window
        self._quiet: set[int] = set()   # agents quiet at the last tick
        self._look: _Look | None = None
        self.ahead: Ahead | None = None   # the verdict judged ahead, while it stands
        self._tried: tuple | None = None   # (mark, quiet) of the last look ahead: not again on the same state
        self._tried_at = float("-inf")
        self.judge_cost: float | None = None   # the last judgement that explained a hang, seconds (the lead)
        self.declared_ahead: float | None = None   # the last HANG's verdict was judged this long before its moment

    def look(self, tick: Tick) -> _Look:
        if self._look is None or self._look.tick is not tick:
            silent_after = self._pacer.silent_after(self._config.silent_after_s)
            expired = self._state.expired(tick.now - self._config.hang_timeout_s + INDEX_SLACK_S)
            quiet = set(self._state.quiet_agents(tick.now - silent_after))
            self._look = _Look(tick, silent_after, expired, quiet)
            tick.near_timeout = bool(expired)
        return self._look

    def wants_snapshot(self, tick: Tick) -> bool:
        look = self.look(tick)
        return (bool(look.expired) or self.probing(tick) or self.ahead_due(tick) or look.quiet != self._quiet
                or not self.detector.armed)

    def probing(self, tick: Tick) -> bool:
        """Whether the verdict rules look this tick (diag/hang/decide.py):
        their look is due and some op has waited their shortest wait. Not
        once the timeout's verdict is being judged ahead: a look would cost
        as much and end after it."""
        look = self.look(tick)
        if look.probing is None:
            limits = self.probe_due(tick.now)
            look.probing = limits is not None and self.detector.armed and bool(
                self._state.expired(tick.now - limits.probe_s + INDEX_SLACK_S)) and self.ahead is None \
                and self.crossing(tick) == float("inf")
        return look.probing

    def cost(self, world_size: int) -> float:
        """What a judgement that explains a hang costs here, in seconds."""
        return self.judge_cost if self.judge_cost is not None else world_size * COST_PER_RANK_S

    def lead(self, world_size: int) -> float:
        """How long before an op crosses the timeout its verdict is judged:
        twice the cost of a judgement that explains a hang and half a
        second, within [INDEX_SLACK_S, half the timeout]."""
        return min(self._config.hang_timeout_s / 2, max(INDEX_SLACK_S, 2 * self.cost(world_size) + 0.5))

    def crossing(self, tick: Tick) -> float:
        """When the earliest op crosses the timeout, where that is within
        the lead and a judgement's cost (inf otherwise, or while a verdict
        judged ahead stands): from then on the verdict rules' look is not
        taken, for it would still run when the look ahead is due."""
        look = self.look(tick)
        if look.crossing is None:
            look.crossing = float("inf")
            if self.detector.armed and self.ahead is None:
                _, world = self._state.size
                soon = self._state.expired(tick.now - self._config.hang_timeout_s + self.lead(world)
                                           + self.cost(world))
                first = self._state.first_start(soon) if soon else None
                if first is not None:
                    look.crossing = first + self._config.hang_timeout_s
        return look.crossing

    def ahead_due(self, tick: Tick) -> bool:
        """Whether this tick judges the timeout's verdict ahead: some op
        crosses it within the lead, none has yet, and the state or the
        quiet agents changed since the last look ahead, at most once in
        twice a judgement's cost (a job that goes on around a stuck op
        changes the state at every report)."""
        crossing = self.crossing(tick)
        if not tick.now < crossing < float("inf"):
            return False
        _, world = self._state.size
        again = max(PROBE_EVERY_S, 2 * (self.judge_cost or 0.0))
        return (crossing - tick.now <= self.lead(world) and tick.now - self._tried_at >= again
                and (self._state.mark(), self.look(tick).quiet) != self._tried)

    def probe_due(self, now: float) -> Limits | None:
        """The verdict rules' limits when their next look is due, else None.
        A look explains every stuck group, which costs O(world) (0.7 s at
        16,384 ranks); while an op is waited on longer than their shortest
        wait (a checkpoint) they look at most every PROBE_EVERY_S or four
        times their own last cost, whichever is longer."""
        if now - self.probe_at < max(PROBE_EVERY_S, 4 * self.probe_cost):
            return None
        limits = self.limits(self._config.silent_after_s, True)
        return limits if limits.proofs else None

    def limits(self, silent_after_s: float, probe: bool) -> Limits:
        """The rules' bounds; the verdict rules look only with --verdicts evidence, and when ``probe``."""
        return Limits(self._config.hang_timeout_s, silent_after_s, blocked_s=self._config.blocked_after_s,
                      proofs=probe and self._config.verdicts == "evidence")

    def run(self, tick: Tick, now: float) -> None:
        look = self.look(tick)
        self.declared_ahead = None   # said of this tick's HANG line only
        try:
            if self.detector.armed and self._ahead_stands(look, tick):
                tick.near_timeout = True   # the perf path waits, as for any op near the timeout
                ahead = self.ahead
                if now >= ahead.at:
                    hold = self._newly_expired(look.expired, now)
                    self.declared_ahead = ahead.at - ahead.snap.now
                    with self._actions.ingest_held(hold):
                        tick.hanging = self.judge(ahead.view(now), tick.unix, look.silent_after_s, False, tick,
                                                  ahead.findings.later(now - ahead.at))
                    self.ahead = None
                return   # until then the verdict stands: nothing to judge
            if tick.snapshot_wanted and self.ahead_due(tick):
                tick.near_timeout = True
                # Held as the declaring tick holds it: this is that judgement,
                # taken early (and the backlog it makes is forgiven).
                with self._actions.ingest_held(True):
                    self.judge_ahead(tick.snap, look)
                return
            if tick.snapshot_wanted:
                # An op is near the timeout: ingest holds while the rules judge and
                # the line and commands go out (not while hang.json is built);
                # the pacer forgives the wait it causes.
                hold = self.detector.armed and self._newly_expired(look.expired, now)
                with self._actions.ingest_held(hold):
                    tick.hanging = self.judge(tick.snap, tick.unix, look.silent_after_s, self.probing(tick), tick)
        finally:
            self._quiet = look.quiet

    def judge(self, snap: Snapshot, unix: float, silent_after_s: float, probe: bool, tick: Tick,
              ahead: Findings | None = None) -> bool:
        """HANG, SILENT on a full snapshot (or the verdict judged ``ahead``
        for this moment); True while the job hangs. While a declared hang
        lasts, only whether it is over and who turned silent (the detector's
        own look at the hung ranks): explaining every rank again each tick
        would cost O(world) for nothing."""
        if ahead is not None:
            findings = ahead
        elif self.detector.armed:
            limits = self.limits(silent_after_s, probe)
            started = time.perf_counter()
            findings = decide(snap, limits)
            took = time.perf_counter() - started
            if findings.is_hang or limits.proofs:   # a look that explains (the rules that explain ran)
                self.judge_cost = took
            if limits.proofs:
                self.probe_at, self.probe_cost = snap.now, took
        else:
            findings = Findings(world_size=snap.world_size, silent_agents=silent_agents(snap, silent_after_s))
        tick.silent_nodes = {a.node_rank for a in findings.silent_agents}
        fire, rearmed, newly_silent = self.detector.update(findings, snap)
        for agent in newly_silent:
            self._actions.say(verdict.silent_line(agent))
        if rearmed:
            log.info("progress resumed: hang detection re-armed")
        if fire:
            self._actions.declare(findings, snap, unix)
        return findings.is_hang or not self.detector.armed

    def judge_ahead(self, snap: Snapshot, look: _Look) -> None:
        """The timeout's verdict at ``look.crossing`` (and a little past),
        judged on ``snap`` moved there: the ranks' ages grow by the time to
        it, as they do while no report says otherwise, and every agent is
        taken to have reported as recently as now (those that stop turn
        quiet, which drops the verdict). Kept (``ahead``) where it is a hang
        and every agent not quiet built its report after the job's latest
        progress: a report that left earlier may still tell of an op this
        snapshot missed, which the mark would not see."""
        self._tried, self._tried_at = (snap.mark, look.quiet), snap.now
        if not snap.mark:
            return
        from_ = snap.mark[1] + PROGRESS_SLACK_S
        late = [n for n, a in snap.agents.items() if a.sent < from_ and n not in look.quiet]
        if late:
            self._said_ahead(f"not judged: {len(late)} agent(s) (node {late[0]} first) had reported nothing built "
                             f"since the job's latest progress")
            return
        at = look.crossing + AHEAD_PAST_S
        started = time.perf_counter()
        findings = decide(moved(snap, at), self.limits(look.silent_after_s, False))
        if not findings.is_hang:
            return
        self.judge_cost = time.perf_counter() - started
        named = {r for g in findings.hung for r in g.ranks} | set(findings.silent_ranks)
        # the ops that may cross by the declaring tick (a tick after ``at`` at most) but for those named
        world = snap.world_size
        soon = self._state.expired(snap.now - self._config.hang_timeout_s + self.lead(world) + self.cost(world) + 1.0)
        nxt = self._state.first_start(soon - named)
        until = float("inf") if nxt is None else nxt + self._config.hang_timeout_s
        self.ahead = Ahead(at, findings, snap, set(look.quiet), until)

    def _ahead_stands(self, look: _Look, tick: Tick) -> bool:
        """Whether the verdict judged ahead holds: nothing moved since its
        snapshot but ages, the same agents are quiet, and no op it does
        not name has crossed the timeout since. Dropped otherwise."""
        ahead = self.ahead
        if ahead is None:
            return False
        mark = self._state.mark()
        if mark == ahead.snap.mark and look.quiet == ahead.quiet and tick.now < ahead.until:
            return True
        self.ahead = None
        if mark == ahead.snap.mark:
            why = "other agents are quiet" if look.quiet != ahead.quiet else "another op crossed the timeout"
        elif mark[0] == ahead.snap.mark[0]:
            why = "an op started or ended"
        else:
            why = "an op was filed or ended, a rank exited or a node's ranks changed"
        self._said_ahead("dropped: " + why)
        return False

    def _said_ahead(self, what: str) -> None:
        """Why a verdict judged ahead is not declared, where judging it cost
        a second or more (a large job): one line, at info."""
        if (self.judge_cost or 0.0) >= 1.0:
            log.info("the timeout's verdict judged ahead (%.1f s) %s; the timeout's tick judges afresh",
                     self.judge_cost, what)

    def _newly_expired(self, expired: set[int], now: float) -> bool:
        """Whether some rank's op reached the index's window lately (within
        HOLD_FOR_S): only then is a HANG about to be declared. Ranks that stay
        there (a silent agent's, an op the rules do not call hung) must not
        hold ingest at every tick."""
        since = {r: self.expired_since.get(r, now) for r in expired}
        self.expired_since = since
        return any(now - t <= HOLD_FOR_S for t in since.values())


class IdlePass(Pass):
    """The idle rule on the snapshot the hang pass judged (its silent agents
    too, found once), then the declaration's hang.json."""

    name = "idle"

    def __init__(self, config: Config, state: JobState, pacer: Pacer, actions) -> None:
        self._config, self._state, self._pacer, self._actions = config, state, pacer, actions
        self.detector = IdleDetector()

    def wants_snapshot(self, tick: Tick) -> bool:
        return (not self.detector.armed
                or tick.now - self._state.active_at >= self._config.idle_timeout_s - ACTIVITY_SLACK_S)

    def run(self, tick: Tick, now: float) -> None:
        if not tick.snapshot_wanted:
            return
        snap = tick.snap
        silent_nodes = tick.silent_nodes
        if silent_nodes is None:   # the hang pass did not judge this snapshot (it failed)
            silent_after = self._pacer.silent_after(self._config.silent_after_s)
            silent_nodes = {a.node_rank for a in silent_agents(snap, silent_after)}
        stall = find_idle(snap, self._config.idle_timeout_s, silent_nodes)
        if self.detector.update(stall, snap):
            self._actions.declare(Findings(world_size=snap.world_size), snap, tick.unix, stall)
        self._actions.run_deferred()
