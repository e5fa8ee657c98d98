"""The collector's own pause is forgiven wherever it lands: between two
watchdog ticks (the watchdog wakes late) or inside one (a SIGSTOP during a
tick: the tick is long, and no thread of the process ran meanwhile)."""

from __future__ import annotations

import io
import time

from diag.collector.config import Config
from diag.collector.events import EventStore
from diag.collector.servicer import SessionRegistry
from diag.collector.state import JobState
from diag.collector.watchdog import Watchdog
from tests.waiting import wait_for


def _watchdog(tmp_path) -> Watchdog:
    # --silent-after and --hang-timeout 2 s: a pause is anything over 1 s
    config = Config(job_id="job1", token="t", timeline_path=str(tmp_path), hang_timeout_s=2.0, silent_after_s=2.0,
                    eval_interval_s=0.05)
    return Watchdog(config, JobState(), SessionRegistry(10), EventStore(config), out=io.StringIO())


def _run(watchdog: Watchdog, stop_in_tick: float, cpu_in_tick: float = 0.0) -> tuple[list[float], float]:
    """The watchdog's thread with its third tick stopped for ``stop_in_tick``
    s (asleep: no CPU, as under SIGSTOP), after ``cpu_in_tick`` s of CPU;
    returns the pauses it forgave and that tick's wall time."""
    forgiven, ticks, tick = [], [], watchdog.tick
    took = []

    def slow_tick(*args):
        ticks.append(1)
        if len(ticks) == 3:
            began = time.monotonic()
            spin = time.process_time() + cpu_in_tick
            while time.process_time() < spin:
                pass
            time.sleep(stop_in_tick)
            took.append(time.monotonic() - began)
        tick(*args)

    watchdog.tick = slow_tick
    watchdog.paused = lambda paused_s, now: forgiven.append(paused_s)
    watchdog.start()
    try:
        wait_for(lambda: len(ticks) > 5, "the ticks after the stopped one", timeout=30)
    finally:
        watchdog.stop()
    return forgiven, took[0]


def test_a_stop_inside_a_tick_is_forgiven_as_a_pause(tmp_path):
    forgiven, took = _run(_watchdog(tmp_path), stop_in_tick=1.6)
    assert len(forgiven) == 1 and 1.5 <= forgiven[0] <= took + 0.1, (forgiven, took)


def test_the_time_a_long_tick_ran_is_never_forgiven(tmp_path):
    # 1.6 s of the tick on CPU (a declaring tick at scale), 0.3 s asleep: at
    # most the time it got no CPU (a loaded host's) is a pause, never its own
    forgiven, took = _run(_watchdog(tmp_path), stop_in_tick=0.3, cpu_in_tick=1.6)
    assert all(p <= took - 1.6 + 0.1 for p in forgiven), (forgiven, took)
