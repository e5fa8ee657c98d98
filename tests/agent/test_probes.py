"""The hook's PROBE records (docs/records.md) become RankProgress.unfinished_kernel
(diag/agent/probes.py), aged on the agent's clock, and go once a clear says so."""

from diag.agent.state import NodeState
from diag.records import format as fmt
from tests.agent.test_state import S, Clock, header, rec


def probe(op_id, launched, *, runs=19, max_ns=1_200_000, since=0, last=None, name="spin_kernel"):
    return fmt.Record(fmt.EVENT_PROBE, fmt.KIND_KERNEL, 0, -1, op_id, 0, runs, launched, max_ns,
                      last if last is not None else launched, 0, since, 0, name)


def test_the_oldest_unfinished_kernel_is_reported_aged_then_cleared():
    clock = Clock(100 * S)
    state = NodeState(clock, is_alive={10}.__contains__)
    state.add_region("hook-r0", header(producer=fmt.PRODUCER_HOOK))
    state.apply("hook-r0", [rec(fmt.EVENT_COUNT, 0, 70 * S, name="spin_kernel", kind=fmt.KIND_KERNEL, count=20),
                            probe(75 * S + 1, 75 * S)])
    [rank] = state.report()
    k = rank.unfinished_kernel
    assert (k.name, k.age_ns, k.history_runs, k.history_max_ns, k.launches_since, k.quiet_ns) == (
        "spin_kernel", 25 * S, 19, 1_200_000, 0, 25 * S)
    clock.now = 110 * S    # said again: the same probe, older, launches after it
    state.apply("hook-r0", [probe(75 * S + 1, 75 * S, since=3, last=80 * S)])
    [rank] = state.report()
    assert (rank.unfinished_kernel.age_ns, rank.unfinished_kernel.launches_since,
            rank.unfinished_kernel.quiet_ns) == (35 * S, 3, 30 * S)
    state.apply("hook-r0", [probe(0, 110 * S, name="")])   # it ended: none is overdue
    [rank] = state.report()
    assert not rank.HasField("unfinished_kernel")


def test_an_exited_rank_reports_no_kernel():
    state = NodeState(Clock(100 * S), is_alive={10}.__contains__)
    state.add_region("hook-r0", header(producer=fmt.PRODUCER_HOOK))
    state.apply("hook-r0", [probe(1, 90 * S)])
    state.mark_exited(10)
    [rank] = state.report()
    assert not rank.alive and not rank.HasField("unfinished_kernel")
