"""A rank hung in a collective, as the performance view shows it (issue 43):
the op still in flight counts as waiting, and the /metrics gauge names it,
its age and its group; a healthy rank's finished ops leave nothing behind.
NodeState and PerfWindow driven with a fake clock (no threads, no I/O)."""

from diag.agent.state import NodeState
from diag.perf import derive, metrics
from diag.perf.window import PerfWindow
from diag.records import format as fmt
from tests.agent.test_state import Clock, header, rec

S = 1_000_000_000
MS = S // 1000


def node(clock):
    state = NodeState(clock, perf=PerfWindow(window_s=60, clock=clock), is_alive={10}.__contains__)
    state.add_region("py-r0", header())
    return state


def healthy_steps(state, clock, steps=100):
    """``steps`` all-reduces of 1 ms, 61 ms apart (the issue's step time)."""
    for i in range(steps):
        t = clock.now + 61 * MS
        state.apply("py-r0", [rec(fmt.EVENT_START, i + 1, t - MS, seq=i + 1),
                              rec(fmt.EVENT_END, i + 1, t, seq=i + 1, dur=MS)])
        clock.now = t


def gauges(state, rank=0):
    collector = metrics.PerfCollector()
    collector.snapshot = metrics.Snapshot("j", "n", ((rank, 0, state.perf_message(rank), "",
                                                      {}, state.in_flight_op(rank)),))
    return {(s.name, s.labels.get("op"), s.labels.get("group")): s.value
            for fam in collector.collect() for s in fam.samples}


def test_a_rank_hung_in_an_all_reduce_waits_and_the_gauge_names_the_op_its_age_and_group():
    clock = Clock(1000 * S)
    state = node(clock)
    healthy_steps(state, clock)
    before = derive.figures(0, state.perf_message(0)).wait_share
    assert 0.01 < before < 0.03
    state.apply("py-r0", [rec(fmt.EVENT_START, 999, clock.now, seq=101)])
    clock.now += 35 * S
    share = derive.figures(0, state.perf_message(0)).wait_share
    # Before: 0.005 (the ENDs alone); 35 s of a 60 s window in the op is most of it.
    assert share > 0.55, share
    got = gauges(state)
    assert got[("xpu_diag_op_in_flight_seconds", "all_reduce", "default")] == 35.0
    assert got[("xpu_diag_collective_wait_ratio", None, None)] == share
    # It ends: the open time becomes the END's interval, counted once.
    state.apply("py-r0", [rec(fmt.EVENT_END, 999, clock.now, seq=101, dur=35 * S)])
    assert abs(derive.figures(0, state.perf_message(0)).wait_share - share) < 1e-6
    assert not [k for k in gauges(state) if k[0] == "xpu_diag_op_in_flight_seconds"]


def test_a_rank_hung_in_its_first_collective_has_a_wait_share():
    clock = Clock(1000 * S)
    state = node(clock)
    state.apply("py-r0", [rec(fmt.EVENT_START, 1, clock.now, seq=1)])
    clock.now += 10 * S
    got = gauges(state)
    assert got[("xpu_diag_collective_wait_ratio", None, None)] == 1.0
    assert got[("xpu_diag_op_in_flight_seconds", "all_reduce", "default")] == 10.0


def test_a_healthy_rank_shows_nothing_hung():
    clock = Clock(1000 * S)
    state = node(clock)
    healthy_steps(state, clock)
    assert not [k for k in gauges(state) if k[0] == "xpu_diag_op_in_flight_seconds"]
    # Caught mid-op: in flight for as long as it has been, no longer.
    state.apply("py-r0", [rec(fmt.EVENT_START, 500, clock.now, seq=101)])
    clock.now += MS
    assert gauges(state)[("xpu_diag_op_in_flight_seconds", "all_reduce", "default")] == 0.001
    assert derive.figures(0, state.perf_message(0)).wait_share < 0.03


def test_a_dead_workers_open_op_is_not_waiting():
    clock = Clock(1000 * S)
    state = node(clock)
    state.apply("py-r0", [rec(fmt.EVENT_START, 1, clock.now, seq=1)])
    state.mark_exited(10)
    clock.now += 10 * S
    assert state.in_flight_op(0) is None
    assert derive.figures(0, state.perf_message(0)).wait_share == 0.0
