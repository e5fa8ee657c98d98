"""NodeState feeds its per-rank views, the timeline ring and the perf window,
through one protocol (diag/records/feed.py): each sees only the records of
the regions a rank's current worker owns (synchronous, fake clock)."""

from diag.agent.state import NodeState
from diag.perf.window import PerfWindow
from diag.records import format as fmt
from diag.timeline.ring import TimelineRing
from tests.agent.test_state import S, Clock, header, rec


def test_a_child_that_inherited_the_rank_takes_over_neither_its_timeline_nor_its_perf_window():
    clock, live = Clock(), {10, 11}
    ring, perf = TimelineRing(30 * S), PerfWindow(window_s=60, clock=clock)
    state = NodeState(clock, perf=perf, is_alive=live.__contains__, timeline=ring)
    state.add_region("py-r0", header())
    state.apply("py-r0", [rec(1, 1, 90 * S, seq=7)])               # the rank's all_reduce hangs
    state.add_region("py-r0-p11", header(pid=11, start=95 * S))    # a spawned child, same RANK
    state.apply("py-r0-p11", [rec(1, 1, 96 * S, name="child_op", seq=1),
                              rec(2, 1, 97 * S, name="child_op", seq=1, dur=S)])
    state.set_dropped("py-r0-p11", 5)
    [snap] = ring.snapshot(100 * S)
    assert snap.meta.pid == 10 and snap.dropped_records == 0
    assert [(s.name, s.seq) for s in snap.in_flight] == [("all_reduce", 7)]   # still the hang
    assert snap.spans == [] and list(perf.message(0).ops) == []             # nothing of the child's
    live.discard(10)
    state.mark_exited(10)   # the owner is gone: the waiting region is a restarted worker's
    state.apply("py-r0-p11", [rec(1, 2, 98 * S, name="step_op", seq=2),
                              rec(2, 2, 99 * S, name="step_op", seq=2, dur=S)])
    [snap] = ring.snapshot(100 * S)
    assert snap.meta.pid == 11 and snap.in_flight == []
    assert [s.name for s in snap.spans] == ["step_op"]
    assert [op.name for op in perf.message(0).ops] == ["step_op"]


def test_a_region_gone_takes_its_open_ops_out_of_the_timeline():
    ring = TimelineRing(30 * S)
    state = NodeState(Clock(), is_alive={10}.__contains__, timeline=ring)
    state.add_region("py-r0", header())
    state.add_region("hook-r0", header(producer=fmt.PRODUCER_HOOK))
    state.apply("py-r0", [rec(1, 1, 90 * S, seq=1)])
    state.apply("hook-r0", [rec(1, 1, 90 * S, name="ncclAllReduce", seq=1)])
    state.set_dropped("hook-r0", 3)
    state.remove_region("py-r0")   # e.g. a region that could no longer be read
    [snap] = ring.snapshot(100 * S)
    assert [(s.name, s.producer) for s in snap.in_flight] == [("ncclAllReduce", fmt.PRODUCER_HOOK)]
    assert snap.dropped_records == 3
