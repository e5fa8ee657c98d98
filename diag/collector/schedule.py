"""The watchdog's tick as a scheduler over registered passes (docs/collector.md
"Passes and rules").

A pass is a small object with a ``name``, how often it runs (``every_s``;
0: every tick) and ``run(tick, now)``. Each tick the scheduler runs the
passes that are due, in the order they were registered, on one
:class:`Tick`: the snapshot is taken once, only if a due pass wants it, and
shared by all. A pass that raises is isolated: one line names it and the
error, the other passes run, and it is tried again when next due; the same
pass failing again is said at most once a minute, with a count. The clock
is the caller's: tests drive the scheduler with a fake one.
"""

from __future__ import annotations

import functools
import logging

log = logging.getLogger("diag.collector")
SAY_AGAIN_S = 60.0   # a pass that keeps failing is said once a minute, not each tick


class Pass:
    """One pass of the tick. ``run`` may return the seconds until it is due
    again (0: at the next tick, say after it put its work off); None means
    ``every_s``."""

    name = "pass"
    every_s = 0.0

    def wants_snapshot(self, tick: "Tick") -> bool:
        """True when this tick's work needs the job's full snapshot."""
        return False

    def run(self, tick: "Tick", now: float) -> float | None:
        raise NotImplementedError


class Tick:
    """What the passes of one tick share: the clocks, the passes due, the
    snapshot (``snap``), taken at the first read by ``take(now)``, and what
    the hang pass leaves for the later ones: ``near_timeout`` (some rank's
    op nears the timeout) and ``hanging`` (an op hangs, or a declared hang
    lasts), for which the perf path waits; ``silent_nodes``, the silent
    agents it found on this snapshot (None: it judged none), which the idle
    pass reuses."""

    def __init__(self, now: float, unix: float, due: list[Pass], take) -> None:
        self.now, self.unix, self.due = now, unix, due
        self._take = take
        self.near_timeout = False
        self.hanging = False
        self.silent_nodes: set[int] | None = None

    @functools.cached_property
    def snapshot_wanted(self) -> bool:
        """Whether any due pass wants the snapshot this tick. Asked lazily
        (by the first pass that may judge), so the passes before it (the
        pacer's) have run; a pass whose answer raises is taken to want it."""
        wanted = False
        for p in self.due:
            try:
                wanted = p.wants_snapshot(self) or wanted
            except Exception as exc:   # noqa: BLE001 - one bad pass must not stop the others judging
                log.error("collector pass %r: cannot tell whether it needs the job's snapshot (%s: %s); "
                          "taking one", p.name, type(exc).__name__, exc)
                wanted = True
        return wanted

    @functools.cached_property
    def snap(self):
        return self._take(self.now)


class Scheduler:
    """Runs the due passes of each tick, each isolated from the others."""

    def __init__(self, passes: list[Pass]) -> None:
        names = [p.name for p in passes]
        if len(set(names)) != len(names):
            raise ValueError(f"pass names repeat: {names}")
        self.passes = list(passes)
        self._next = {p.name: float("-inf") for p in passes}
        self._failing: dict[str, list] = {}   # name -> [failures not yet said, when last said]

    def next_at(self, name: str) -> float:
        return self._next[name]

    def set_next(self, name: str, at: float) -> None:
        """When pass ``name`` is next due (tests: 0.0 makes it due now)."""
        self._next[name] = at

    def due(self, now: float) -> list[Pass]:
        return [p for p in self.passes if now >= self._next[p.name]]

    def run(self, now: float, unix: float, take) -> Tick:
        """One tick at monotonic ``now`` (wall clock ``unix``); ``take(now)``
        takes the job's snapshot. Returns the tick (tests read it)."""
        tick = Tick(now, unix, self.due(now), take)
        for p in tick.due:
            again = None
            try:
                again = p.run(tick, now)
            except Exception as exc:   # noqa: BLE001 - the other passes keep running
                self._failed(p, exc, now)
            delay = p.every_s if again is None else again
            # Due at every tick whatever the clock says: a driven clock (tests, benches) may step back.
            self._next[p.name] = now + delay if delay > 0 else float("-inf")
        return tick

    def _failed(self, p: Pass, exc: Exception, now: float) -> None:
        failing = self._failing.setdefault(p.name, [0, float("-inf")])
        failing[0] += 1
        if now - failing[1] < SAY_AGAIN_S:
            return
        again = f" ({failing[0] - 1} more failure(s) since the last such line)" if failing[0] > 1 else ""
        log.error("collector pass %r failed: %s: %s; the other passes go on, it runs again when due%s",
                  p.name, type(exc).__name__, exc, again)
        failing[:] = [0, now]
