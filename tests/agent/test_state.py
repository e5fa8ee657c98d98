"""NodeState driven synchronously with a fake clock (no threads, no I/O)."""

from diag.agent.state import NodeState
from diag.records import format as fmt

S = 1_000_000_000


class Clock:
    def __init__(self, now=100 * S):
        self.now = now

    def __call__(self):
        return self.now


def header(rank=0, pid=10, start=0, producer=fmt.PRODUCER_PYTHON):
    return fmt.Header(4096, pid, rank, rank, 4, producer, 0, 0, start)


def rec(event, op_id, t, name="all_reduce", seq=1, comm_id=0, dur=0, kind=fmt.KIND_COLLECTIVE,
        count=1, nbytes=64, flags=0, flops=0, size=4):
    return fmt.Record(event, kind, flags, 0, op_id, comm_id, seq, t, dur, nbytes, flops, count, size, name)


def make(clock=None, live=None, log=None):
    """``live``: the pids that count as running (default: none but pid 10,
    while it has not been dropped from the set)."""
    live = {10} if live is None else live
    state = NodeState(clock or Clock(), is_alive=live.__contains__, log=log)
    state.add_region("py-r0", header())
    return state


def test_in_flight_op_age_stats_and_comm_seqs():
    clock = Clock()
    state = make(clock)
    state.apply("py-r0", [rec(1, 1, 90 * S, seq=1), rec(2, 1, 91 * S, seq=1, dur=S),
                          rec(1, 2, 95 * S, seq=2)])
    [rank] = state.report()
    assert rank.oldest_in_flight.name == "all_reduce" and rank.oldest_in_flight.seq == 2
    assert rank.oldest_in_flight.age_ns == 5 * S and rank.oldest_in_flight.producer == 1
    assert [(s.name, s.count, s.total_ns, s.max_ns, s.bytes) for s in rank.stats] == [
        ("all_reduce", 1, S, S, 64)]
    assert [(c.comm_id, c.last_started_seq, c.last_completed_seq) for c in rank.comms] == [(0, 2, 1)]
    assert rank.idle_ns == 5 * S and rank.last_op == "all_reduce" and rank.alive
    clock.now += 2 * S
    [rank] = state.report()
    assert rank.stats == [] and rank.oldest_in_flight.age_ns == 7 * S   # stats are deltas


def test_oldest_of_several_in_flight_ops_is_reported():
    state = make()
    state.apply("py-r0", [rec(1, 1, 50 * S, name="train_step", seq=0, kind=fmt.KIND_HOST_FUNC),
                          rec(1, 2, 60 * S, seq=1)])
    assert state.report()[0].oldest_in_flight.name == "train_step"


def test_end_recovers_from_a_dropped_end_on_the_same_comm():
    state = make()
    # seq 1's END was dropped by a full ring; seq 2's END proves seq 1 finished.
    state.apply("py-r0", [rec(1, 1, 90 * S, seq=1), rec(1, 2, 91 * S, seq=2),
                          rec(2, 2, 92 * S, seq=2)])
    assert not state.report()[0].HasField("oldest_in_flight")


def test_recovery_never_crosses_communicators_or_regions():
    state = make()
    state.add_region("hook-r0", header(producer=fmt.PRODUCER_HOOK))
    state.apply("py-r0", [rec(1, 1, 90 * S, seq=1, comm_id=7)])
    state.apply("hook-r0", [rec(1, 1, 91 * S, seq=1)])
    state.apply("py-r0", [rec(1, 2, 92 * S, seq=5), rec(2, 2, 93 * S, seq=5)])
    [rank] = state.report()
    assert rank.oldest_in_flight.comm_id == 7
    state.apply("py-r0", [rec(2, 1, 94 * S, seq=1, comm_id=7)])
    assert state.report()[0].oldest_in_flight.producer == fmt.PRODUCER_HOOK


def test_counts_and_dropped_records_are_reported():
    state = make()
    state.add_region("hook-r0", header(producer=fmt.PRODUCER_HOOK))
    state.apply("hook-r0", [rec(3, 0, 95 * S, name="gemm_kernel", kind=fmt.KIND_KERNEL, count=40)])
    state.set_dropped("py-r0", 3)
    state.set_dropped("hook-r0", 4)
    [rank] = state.report()
    assert rank.dropped_records == 7
    assert [(s.name, s.count) for s in rank.stats] == [("gemm_kernel", 40)]
    assert rank.idle_ns == 5 * S          # launches count as activity (the idle rule)


def test_restarted_worker_replaces_the_old_incarnation():
    live = {10}
    state = make(live=live)
    state.apply("py-r0", [rec(1, 1, 90 * S)])
    live.discard(10)                                       # the old worker exited
    state.add_region("py-r0-new", header(pid=11, start=95 * S))
    state.apply("py-r0", [rec(1, 2, 96 * S)])              # the old region is ignored now
    [rank] = state.report()
    assert rank.pid == 11 and not rank.HasField("oldest_in_flight")
    state.add_region("py-r0-stale", header(pid=9, start=1))  # older than what we hold
    assert state.report()[0].pid == 11


def test_exited_worker_is_reported_dead_with_nothing_in_flight():
    state = make()
    state.apply("py-r0", [rec(1, 1, 90 * S)])
    state.mark_exited(10)
    [rank] = state.report()
    assert not rank.alive and not rank.HasField("oldest_in_flight") and state.pid_of(0) is None


def test_records_of_unknown_regions_are_ignored():
    state = make()
    state.apply("nobody", [rec(1, 1, 90 * S)])
    assert not state.report()[0].HasField("oldest_in_flight")
