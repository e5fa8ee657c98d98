"""The collector watchdog's passes, in the order each tick runs them
(schedule.py runs them; docs/collector.md "Passes and rules").

* ``pace``: how far ingest is behind (pace.py), before anything reads ages.
* ``hang``, ``idle``: the hang path (hang_pass.py): HANG, SILENT, the idle stall.
* ``slow``: SLOW judgements and GPU lines, on the perf path's cadence
  (FULL_EVERY_S, or a second per FULL_RANKS_PER_S ranks); put off while an
  op nears the timeout or a hang lasts.
* ``drops``, ``stats``: the DROPPED line, the ingest rate.
* ``timeline``: timeline requests closed at their deadline.
* ``failure``: the FAILED verdict (failures.py).
* ``events``: hang.json rewrites, the "stacks are in" and last-words lines,
  and --hang-action's kill once they are (the watchdog's actions).

Each pass owns what it remembers from tick to tick; what one leaves for a
later one in the same tick is a field of the Tick.
"""

from __future__ import annotations

import logging

from diag.collector import verdict
from diag.collector.hang_pass import HangPass, IdlePass
from diag.collector.schedule import Pass, Tick

log = logging.getLogger("diag.collector")
FULL_EVERY_S = 2.0
FULL_RANKS_PER_S = 20_000


class PacePass(Pass):
    name = "pace"

    def __init__(self, pacer) -> None:
        self._pacer = pacer

    def run(self, tick: Tick, now: float) -> None:
        self._pacer.check(now)


class SlowPass(Pass):
    """Due on the perf path's cadence; while due it wants the snapshot (and
    so the hang and idle passes judge it too: the safety net under the
    indexes)."""

    name = "slow"

    def __init__(self, state, side_work) -> None:
        self._state, self._side_work = state, side_work

    def wants_snapshot(self, tick: Tick) -> bool:
        return True

    def run(self, tick: Tick, now: float) -> float:
        # The hang path first: while an op nears the timeout or a hang
        # lasts, the perf path (SLOW, GPU lines) waits for a later tick.
        if tick.near_timeout or tick.hanging:
            return 0.0
        agents, ranks = self._state.size
        self._side_work(tick.snap, tick.unix)
        return max(FULL_EVERY_S, ranks / FULL_RANKS_PER_S)


class DropsPass(Pass):
    """Says when ranks drop progress records (full rings), first at any drop
    and then each time the job-wide total doubles, so the line stays rare."""

    name = "drops"

    def __init__(self, state, say) -> None:
        self._state, self._say = state, say
        self._said = 0   # job-wide dropped-record total at the last DROPPED line

    def run(self, tick: Tick, now: float) -> None:
        dropping = self._state.dropped()
        total = sum(dropping.values())
        if total and total >= 2 * self._said:
            self._say(verdict.dropped_line(dropping))
            self._said = total


class StatsPass(Pass):
    """Every --stats-interval: reports ingested so far and the rate since the last line."""

    name = "stats"

    def __init__(self, config, state, pacer) -> None:
        self._config, self._state, self._pacer = config, state, pacer
        self.every_s = config.stats_interval_s
        self._at: float | None = None
        self._reports = 0

    def run(self, tick: Tick, now: float) -> None:
        if self._at is None:
            self._at = now
        if now - self._at < self._config.stats_interval_s:
            return
        total = self._state.reports
        rate = (total - self._reports) / (now - self._at)
        agents, ranks = self._state.size
        coalesced = self._state.coalesced
        log.info("ingest: %d reports total, %.1f/s over the last %.3f s; %d agents, %d ranks; %.2f s behind%s",
                 total, rate, now - self._at, agents, ranks, self._pacer.lag_s,
                 f"; {coalesced} of them coalesced in report relays" if coalesced else "")
        self._at, self._reports = now, total


class TimelinePass(Pass):
    name = "timeline"

    def __init__(self, wd) -> None:
        self._wd = wd   # its timelines may be set after it starts (tests)

    def run(self, tick: Tick, now: float) -> None:
        if self._wd.timelines is not None:
            self._wd.timelines.tick(now)


class FailurePass(Pass):
    """The FAILED verdict (failures.py): looks only when reports of exited
    ranks came in, at most once a second; before ``events``, which writes
    its failure.json."""

    name = "failure"

    def __init__(self, failures) -> None:
        self._failures = failures

    def run(self, tick: Tick, now: float) -> None:
        self._failures.tick(now, tick.unix)


class EventsPass(Pass):
    name = "events"

    def __init__(self, events_tick) -> None:
        self._events_tick = events_tick

    def run(self, tick: Tick, now: float) -> None:
        self._events_tick(now)


def all_passes(wd, hang: HangPass, idle: IdlePass) -> list[Pass]:
    """The passes of watchdog ``wd``, in the order each tick runs them."""
    return [PacePass(wd.pacer), hang, idle, SlowPass(wd.state, wd.side_work), DropsPass(wd.state, wd.say),
            StatsPass(wd.config, wd.state, wd.pacer), TimelinePass(wd), FailurePass(wd.failures),
            EventsPass(wd.events_tick)]
