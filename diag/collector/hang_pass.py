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
"""

from __future__ import annotations

import dataclasses
import logging
import time

from diag.collector import verdict
from diag.collector.config import Config
from diag.collector.pace import Pacer
from diag.collector.schedule import Pass, Tick
from diag.collector.state import JobState, Snapshot
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


@dataclasses.dataclass
class _Look:
    """What the hang pass reads of the indexes, once a tick."""

    tick: Tick
    silent_after_s: float
    expired: set[int]            # ranks whose op nears the timeout
    quiet: set[int]              # agents quiet past --silent-after (silent candidates)
    probing: bool | None = None  # whether the verdict rules look this tick (worked out when asked)


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
        return bool(look.expired) or self.probing(tick) or look.quiet != self._quiet or not self.detector.armed

    def probing(self, tick: Tick) -> bool:
        """Whether the verdict rules look this tick (diag/hang/decide.py):
        their look is due and some op has waited their shortest wait."""
        look = self.look(tick)
        if look.probing is None:
            limits = self.probe_due(tick.now)
            look.probing = limits is not None and self.detector.armed and bool(
                self._state.expired(tick.now - limits.probe_s + INDEX_SLACK_S))
        return look.probing

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
        try:
            if tick.snapshot_wanted:
                # An op is near the timeout: ingest holds while the rules judge and
                # the line and commands go out (not while hang.json is built);
                # the pacer forgives the wait it causes.
                hold = self.detector.armed and self._newly_expired(look.expired, now)
                with self._actions.ingest_held(hold):
                    tick.hanging = self.judge(tick.snap, tick.unix, look.silent_after_s, self.probing(tick), tick)
        finally:
            self._quiet = look.quiet

    def judge(self, snap: Snapshot, unix: float, silent_after_s: float, probe: bool, tick: Tick) -> bool:
        """HANG, SILENT on a full snapshot; True while the job hangs. While a
        declared hang lasts, only whether it is over and who turned silent
        (the detector's own look at the hung ranks): explaining every rank
        again each tick would cost O(world) for nothing."""
        if self.detector.armed:
            limits = self.limits(silent_after_s, probe)
            started = time.perf_counter()
            findings = decide(snap, limits)
            if limits.proofs:
                self.probe_at, self.probe_cost = snap.now, time.perf_counter() - started
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
