"""Overload: the collector notices it is falling behind, says so once, sheds
the perf path and asks the agents to back off; and undoes it all once caught up.

How far behind is measured two ways, each tick of the watchdog:

* report lag: how long the reports ingested since the last tick waited
  between being built by their agent and being ingested (state.py learns
  each agent's clock offset; agents that send no ``sent_mono_ns`` count 0);
* loop lag: how long a callback posted to the server's event loop waits
  before it runs (reports queue in gRPC's buffers while the loop is busy).

Behind by more than BEHIND_S for HOLD_S: one ``OVERLOAD:`` line, SLOW
judgements paused (the perf path goes first; the hang path never does) and a
ReportPace to every agent: report every PACE_STEPS_S[0] s with the perf window
in one report of PERF_EVERY. Still behind after ESCALATE_S: the next, slower
step. Less than CAUGHT_UP_S behind for RECOVER_S: the quicker step, one at a
time, and from the first one ``OVERLOAD over:`` and the agents' own pace.
Straight back from 4 s to their own 1 s, 12,500 agents quadrupled the load
on a collector that had only just caught up, and it fell behind again within
seconds (device host, 4 runs of 4). While agents pace, an agent is silent
only after 3 of the longer intervals + 2 s.
"""

from __future__ import annotations

import logging
import time

from diag.pb import collector_pb2 as pb

log = logging.getLogger("diag.collector")
BEHIND_S = 1.0          # more than this behind ...
HOLD_S = 2.0            # ... for this long is an overload
CAUGHT_UP_S = 0.3       # less than this behind ...
RECOVER_S = 10.0        # ... for this long is recovered
ESCALATE_S = 10.0       # still behind this long after a step: the next step
PACE_STEPS_S = (2.0, 4.0, 8.0)
PERF_EVERY = 10         # the perf window with one report in this many while pacing


class Pacer:
    def __init__(self, config, state, registry, say) -> None:
        self._config = config
        self._state = state
        self._registry = registry
        self._say = say
        self._loop = None
        self._probe_posted: float | None = None   # when the pending loop probe was posted
        self._probe_ran: float | None = None
        self._behind_since: float | None = None
        self._caught_up_since: float | None = None
        self._stepped_at = 0.0
        self._since = 0.0
        self.step = -1          # -1: not overloaded; else the index in PACE_STEPS_S in force
        self.events = 0         # OVERLOAD lines said (tests)
        self.lag_s = 0.0        # the last measurement
        self._forgive_until = 0.0

    @property
    def overloaded(self) -> bool:
        return self.step >= 0

    def start(self, loop) -> None:
        self._loop = loop

    def stop(self) -> None:
        self._loop = None

    def silent_after(self, base_s: float) -> float:
        """--silent-after, or 3 paced intervals + 2 s while agents pace."""
        if self.step < 0:
            return base_s
        return max(base_s, 3 * self.interval_s() + 2.0)

    def interval_s(self) -> float:
        """The interval asked of the agents at this step: never more than half
        the hang timeout, so the report that shows a stalled op comes in time."""
        return min(PACE_STEPS_S[self.step], max(1.0, self._config.hang_timeout_s / 2))

    def _loop_lag(self, now: float) -> float:
        """How long the last probe waited on the loop (or has waited so far);
        posts the next one once the last has run."""
        loop = self._loop
        if loop is None:
            return 0.0
        posted, ran = self._probe_posted, self._probe_ran
        if posted is not None and ran is None:
            return now - posted
        lag = (ran - posted) if posted is not None else 0.0
        self._probe_posted, self._probe_ran = now, None
        try:
            loop.call_soon_threadsafe(self._probe_done)
        except RuntimeError:   # the loop is closing
            self._probe_posted = None
        return lag

    def _probe_done(self) -> None:
        self._probe_ran = time.monotonic()

    def forgive(self, until: float) -> None:
        """Lag until ``until`` (monotonic) was the watchdog's own doing: ingest
        held while it judged a hang. Not counted."""
        self._forgive_until = max(self._forgive_until, until)

    def check(self, now: float) -> None:
        """One measurement and, when the state changes, the line and the pace."""
        report_lag, _ = self._state.take_lag()
        self.lag_s = lag = max(report_lag, self._loop_lag(now))
        if time.monotonic() < self._forgive_until:
            return
        if lag > BEHIND_S:
            self._caught_up_since = None
            self._behind_since = self._behind_since if self._behind_since is not None else now
            if self.step < 0 and now - self._behind_since >= HOLD_S:
                self._enter(now, lag)
            elif 0 <= self.step < len(PACE_STEPS_S) - 1 and now - self._stepped_at >= ESCALATE_S:
                self.step += 1
                self._stepped_at = now
                self._broadcast()
                log.info("still %.1f s behind: agents asked to report every %g s", lag, self.interval_s())
            return
        self._behind_since = None
        if self.step < 0:
            return
        if lag < CAUGHT_UP_S:
            self._caught_up_since = self._caught_up_since if self._caught_up_since is not None else now
            if now - self._caught_up_since < RECOVER_S:
                return
            if self.step == 0:
                self._leave(now, lag)
                return
            self.step -= 1
            self._stepped_at = self._caught_up_since = now
            self._broadcast()
            log.info("caught up (%.2f s behind): agents asked to report every %g s", lag, self.interval_s())
        else:
            self._caught_up_since = None

    def _enter(self, now: float, lag: float) -> None:
        self.step, self._stepped_at, self._since = 0, now, now
        self.events += 1
        agents, _ = self._state.size
        self._broadcast()
        self._say(f"OVERLOAD: the collector is {lag:.1f} s behind the reports of {agents:,} agents; "
                  f"shedding the perf path: SLOW judgements paused, agents asked to report every "
                  f"{self.interval_s():g} s with their performance window in one report of {PERF_EVERY}; "
                  f"hang detection goes on")

    def _leave(self, now: float, lag: float) -> None:
        self.step = -1
        self._caught_up_since = None
        self._broadcast()
        self._say(f"OVERLOAD over: the collector caught up ({lag:.2f} s behind) after {now - self._since:.0f} s; "
                  f"agents back to their own pace, SLOW judgements resumed")

    def _broadcast(self) -> None:
        if self.step < 0:
            command = pb.Command(report_pace=pb.ReportPace())
            self._registry.pace = None
        else:
            command = pb.Command(report_pace=pb.ReportPace(interval_ms=int(self.interval_s() * 1000),
                                                           perf_every=PERF_EVERY))
            self._registry.pace = command
        self._registry.broadcast(command)
