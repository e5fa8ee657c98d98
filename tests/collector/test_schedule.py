"""The watchdog's tick as a scheduler of passes (diag/collector/schedule.py,
passes.py), driven by a fake clock: due passes run in order, a snapshot is
taken once and only when wanted, and a failing pass is one line while the
others keep running."""

import logging

from diag.collector.schedule import SAY_AGAIN_S, Pass, Scheduler
from tests.collector.fakes import node_report, rank_progress
from tests.collector.test_collector_rules import T0, make_watchdog, stalled_rank2_report


class Recording(Pass):
    def __init__(self, name, every_s=0.0, wants=False, fails=False, again=None, runs=None):
        self.name, self.every_s, self.wants, self.fails, self.again = name, every_s, wants, fails, again
        self.runs = runs if runs is not None else []

    def wants_snapshot(self, tick):
        return self.wants

    def run(self, tick, now):
        self.runs.append((self.name, now, tick.snap if tick.snapshot_wanted else None))
        if self.fails:
            raise OSError(f"{self.name} broke")
        return self.again


def test_passes_run_in_order_each_when_due_on_a_fake_clock():
    runs = []
    every, slow, deferred = Recording("every", runs=runs), Recording("slow", 2.0, runs=runs), \
        Recording("deferred", 1.0, again=0.0, runs=runs)
    scheduler = Scheduler([every, slow, deferred])
    for t in (0.0, 0.5, 1.0, 1.5, 2.0):
        scheduler.run(T0 + t, 0.0, lambda now: None)
    names = [(name, now - T0) for name, now, _ in runs]
    assert [n for n in names if n[0] == "every"] == [("every", t) for t in (0.0, 0.5, 1.0, 1.5, 2.0)]
    assert [n for n in names if n[0] == "slow"] == [("slow", 0.0), ("slow", 2.0)]
    # its run put its work off (returned 0): due again at the next tick
    assert [n for n in names if n[0] == "deferred"] == [("deferred", t) for t in (0.0, 0.5, 1.0, 1.5, 2.0)]
    assert [n for n, _ in names[:3]] == ["every", "slow", "deferred"]


def test_a_pass_due_every_tick_runs_even_when_a_driven_clock_steps_back():
    runs = []
    scheduler = Scheduler([Recording("every", runs=runs), Recording("slow", 2.0, runs=runs)])
    for t in (5.0, 0.0):
        scheduler.run(T0 + t, 0.0, lambda now: None)
    assert [(name, now - T0) for name, now, _ in runs] == [("every", 5.0), ("slow", 5.0), ("every", 0.0)]


def test_the_snapshot_is_taken_once_a_tick_and_only_when_a_due_pass_wants_it():
    taken = []
    scheduler = Scheduler([Recording("a"), Recording("b", 10.0, wants=True), Recording("c")])

    def take(now):
        taken.append(now)
        return f"snap@{now}"

    tick = scheduler.run(T0, 0.0, take)
    assert taken == [T0] and tick.snap == f"snap@{T0}"
    scheduler.run(T0 + 1, 0.0, take)          # b not due: nobody wants it
    assert taken == [T0]


def test_a_failing_pass_is_one_line_and_the_others_keep_running(caplog):
    runs = []
    scheduler = Scheduler([Recording("broken", fails=True, runs=runs), Recording("after", runs=runs)])
    with caplog.at_level(logging.ERROR, logger="diag.collector"):
        for t in (0.0, 0.5, 1.0):
            scheduler.run(T0 + t, 0.0, lambda now: None)
        scheduler.run(T0 + SAY_AGAIN_S, 0.0, lambda now: None)
    assert [name for name, _, _ in runs].count("after") == 4 and [n for n, _, _ in runs].count("broken") == 4
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("\n" not in line and not r.exc_info for line, r in zip(lines, caplog.records))
    assert lines[0].startswith("collector pass 'broken' failed: OSError: broken broke; the other passes go on")
    assert lines[1].endswith("(2 more failure(s) since the last such line)")


def test_the_watchdogs_events_and_timelines_run_when_an_earlier_pass_fails(tmp_path, caplog):
    """A pass that raises (here the dropped-records count) no longer ends the
    tick: the HANG is declared by the hang pass before it, and the timeline
    and events passes after it still run."""
    watchdog, state, registry, out = make_watchdog(tmp_path)
    ticked = []

    class Timelines:
        def tick(self, now):
            ticked.append(now)

        def for_event(self, *args):
            pass

    watchdog.timelines = Timelines()

    def dropped():
        raise RuntimeError("index torn")

    state.dropped = dropped
    state.ingest(stalled_rank2_report(age_s=11.0), T0)
    with caplog.at_level(logging.ERROR, logger="diag.collector"):
        watchdog.tick(now=T0, now_unix=1.7e9)
    assert out.getvalue().startswith("HANG: "), out.getvalue()
    assert ticked == [T0]
    assert len(watchdog.declared) == 1
    # the collector's own records: caplog's handler also takes other threads' (run 10 caught an
    # "Exception n..." of another test's thread in this worker)
    ours = [r for r in caplog.records if r.name.startswith("diag.collector")]
    assert [r.getMessage().split(":")[0] for r in ours] == ["collector pass 'drops' failed"]


def test_the_slow_pass_waits_while_an_op_nears_the_timeout(tmp_path):
    watchdog, state, registry, out = make_watchdog(tmp_path)
    judged = []
    watchdog.slow.tick = lambda snap, *args: judged.append(snap.now)
    watchdog.gpus.tick = lambda snap: None
    state.ingest(node_report(0, [rank_progress(r, 2, op=dict(name="all_reduce", kind=3), age_s=9.5, seq=4)
                                 for r in range(2)]), T0)
    watchdog.tick(now=T0)                  # within INDEX_SLACK_S of the 10 s timeout: the hang path only
    assert judged == [] and watchdog.scheduler.due(T0 + 0.5)[3].name == "slow"
    state.ingest(node_report(0, [rank_progress(r, 2, seq=4, started=4) for r in range(2)], seq=2), T0 + 0.5)
    watchdog.tick(now=T0 + 0.5)
    assert judged == [T0 + 0.5] and watchdog.scheduler.next_at("slow") == T0 + 2.5
