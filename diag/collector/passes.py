"""The collector watchdog's passes, in the order each tick runs them
(schedule.py runs them; docs/collector.md "Passes and rules").

* ``pace``: how far ingest is behind (pace.py), before anything reads ages.
* ``hang``: the hang rules (diag/hang) on the snapshot: HANG, SILENT. Ingest
  is held, in this pass alone, while an op that just neared the timeout is
  judged and its line and commands go out.
* ``idle``: the idle rule (diag/hang/idle.py) on the same snapshot.
* ``slow``: SLOW judgements and GPU lines, on the perf path's cadence
  (FULL_EVERY_S, or a second per FULL_RANKS_PER_S ranks); put off while an
  op nears the timeout or a hang lasts.
* ``drops``, ``stats``: the DROPPED line, the ingest rate.
* ``timeline``: timeline requests closed at their deadline.
* ``events``: hang.json rewrites, the "stacks are in" and last-words lines,
  and --hang-action's kill once they are.

Each pass reads the watchdog that owns it (``wd``): its state, detectors
and actions. What one pass leaves for the next is on the Tick.
"""

from __future__ import annotations

from diag.collector.schedule import Pass, Tick
from diag.hang.detector import ACTIVITY_SLACK_S

# The index files ops by the second they started, and a later report may date
# a start a little earlier: look at ranks this much before the timeout.
INDEX_SLACK_S = 1.5
FULL_EVERY_S = 2.0
FULL_RANKS_PER_S = 20_000


class PacePass(Pass):
    name = "pace"

    def __init__(self, wd) -> None:
        self.wd = wd

    def run(self, tick: Tick, now: float) -> None:
        self.wd.pacer.check(now)


class HangPass(Pass):
    """The state's indexes say which ranks' ops may be past the timeout and
    which agents may be silent: only then (or while a hang lasts, or when
    another pass wants it) is a full snapshot judged, so a tick's work does
    not grow with the healthy ranks (issue 21)."""

    name = "hang"

    def __init__(self, wd) -> None:
        self.wd = wd

    def wants_snapshot(self, tick: Tick) -> bool:
        wd = self.wd
        return (bool(self.expired(tick)) or self.probing(tick) or self.quiet(tick) != wd._quiet
                or not wd.detector.armed)

    def probing(self, tick: Tick) -> bool:
        """Whether the verdict rules look this tick (diag/hang/decide.py):
        their look is due and some op has waited their shortest wait."""
        if not hasattr(tick, "probing"):
            wd = self.wd
            waits = wd.probe_due(tick.now)
            tick.probing = waits is not None and wd.detector.armed and bool(
                wd._state.expired(tick.now - waits.probe_s + INDEX_SLACK_S))
        return tick.probing

    @staticmethod
    def silent_after(wd, tick: Tick) -> float:
        if not hasattr(tick, "silent_after"):
            tick.silent_after = wd.pacer.silent_after(wd._config.silent_after_s)
        return tick.silent_after

    def expired(self, tick: Tick) -> set[int]:
        if not hasattr(tick, "expired"):
            tick.expired = self.wd._state.expired(tick.now - self.wd._config.hang_timeout_s + INDEX_SLACK_S)
        return tick.expired

    def quiet(self, tick: Tick) -> set[int]:
        if not hasattr(tick, "quiet"):
            tick.quiet = set(self.wd._state.quiet_agents(tick.now - self.silent_after(self.wd, tick)))
        return tick.quiet

    def run(self, tick: Tick, now: float) -> None:
        wd = self.wd
        quiet = self.quiet(tick)
        try:
            if tick.snapshot_wanted:
                tick.hanging = self._judge(tick, now)
        finally:
            wd._quiet = quiet

    def _judge(self, tick: Tick, now: float) -> bool:
        wd = self.wd
        snap = tick.snap
        # An op is near the timeout: ingest holds while the rules judge and
        # the line and commands go out (not while hang.json is built);
        # the pacer forgives the wait it causes.
        hold = wd.detector.armed and wd._newly_expired(self.expired(tick), now)
        with wd.ingest_held(hold):
            return wd._judge(snap, tick.unix, self.silent_after(wd, tick), self.probing(tick))


class IdlePass(Pass):
    name = "idle"

    def __init__(self, wd) -> None:
        self.wd = wd

    def wants_snapshot(self, tick: Tick) -> bool:
        wd = self.wd
        return (not wd.idle_detector.armed
                or tick.now - wd._state.active_at >= wd._config.idle_timeout_s - ACTIVITY_SLACK_S)

    def run(self, tick: Tick, now: float) -> None:
        if tick.snapshot_wanted:
            self.wd._judge_idle(tick.snap, tick.unix, HangPass.silent_after(self.wd, tick))


class SlowPass(Pass):
    """Due on the perf path's cadence; while due it wants the snapshot (and
    so the hang and idle passes judge it too: the safety net under the
    indexes)."""

    name = "slow"

    def __init__(self, wd) -> None:
        self.wd = wd

    def wants_snapshot(self, tick: Tick) -> bool:
        return True

    def run(self, tick: Tick, now: float) -> float:
        # The hang path first: while an op nears the timeout or a hang
        # lasts, the perf path (SLOW, GPU lines) waits for a later tick.
        if getattr(tick, "expired", None) or tick.hanging:
            return 0.0
        agents, ranks = self.wd._state.size
        self.wd._side_work(tick.snap, tick.unix)
        return max(FULL_EVERY_S, ranks / FULL_RANKS_PER_S)


class DropsPass(Pass):
    name = "drops"

    def __init__(self, wd) -> None:
        self.wd = wd

    def run(self, tick: Tick, now: float) -> None:
        self.wd._report_drops()


class StatsPass(Pass):
    name = "stats"

    def __init__(self, wd) -> None:
        self.wd = wd
        self.every_s = wd._config.stats_interval_s

    def run(self, tick: Tick, now: float) -> None:
        self.wd._log_stats(now)


class TimelinePass(Pass):
    name = "timeline"

    def __init__(self, wd) -> None:
        self.wd = wd

    def run(self, tick: Tick, now: float) -> None:
        if self.wd.timelines is not None:
            self.wd.timelines.tick(now)


class EventsPass(Pass):
    name = "events"

    def __init__(self, wd) -> None:
        self.wd = wd

    def run(self, tick: Tick, now: float) -> None:
        self.wd._events_tick(now)


class FailurePass(Pass):
    """The FAILED verdict (failures.py): looks only when reports of exited
    ranks came in, at most once a second; before ``events``, which writes
    its failure.json."""

    name = "failure"

    def __init__(self, wd) -> None:
        self.wd = wd

    def run(self, tick: Tick, now: float) -> None:
        self.wd.failures.tick(now, tick.unix)


def all_passes(wd) -> list[Pass]:
    return [cls(wd) for cls in (PacePass, HangPass, IdlePass, SlowPass, DropsPass, StatsPass, TimelinePass,
                                FailurePass, EventsPass)]
