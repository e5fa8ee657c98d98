"""Time in communication is the union of the ops' intervals, not their sum (issue 18)."""

from diag.perf import derive
from diag.perf.window import PerfWindow
from diag.records import format as fmt
from tests.perf.test_window import Clock

MS = 1_000_000


def rec(name, kind, dur, t, comm_id=0, flags=0):
    """An END as a producer writes it: ``t`` its end, ``dur`` how long it took."""
    return fmt.Record(fmt.EVENT_END, kind, flags, 0, 1, comm_id, 1, t, dur, 1024, 0, 1, 2, name)


def run(ops_per_step, steps=10, step_ns=100 * MS, producer=fmt.PRODUCER_PYTHON):
    """One rank's window over ``steps`` steps; ``ops_per_step``: (name, kind,
    comm_id, start, end) in ms from each step's start, in END order."""
    clock = Clock()
    window = PerfWindow(window_s=10, clock=clock)
    start = clock.ns
    window.observe(0, producer, [rec("anchor", fmt.KIND_HOST_FUNC, 1, start)])
    records = []
    for i in range(steps):
        t = start + i * step_ns
        for name, kind, comm_id, a, b in ops_per_step:
            records.append(rec(name, kind, (b - a) * MS, t + b * MS, comm_id))
    clock.ns = start + steps * step_ns
    window.observe(0, producer, records)
    return window.message(0)


def busy(msg, comm_id=None):
    return {(b.comm_id if not b.all_comms else None): b.busy_ns for b in msg.comm_busy}[comm_id]


def test_two_overlapping_p2p_ops_count_once():
    # a pipeline stage: two microbatches' isend/irecv in flight at once, 80 ms of each 100
    msg = run([("isend", fmt.KIND_P2P, 0, 0, 60), ("irecv", fmt.KIND_P2P, 0, 20, 80)])
    assert busy(msg) == busy(msg, 0) == 10 * 80 * MS
    assert abs(derive.figures(0, msg).wait_share - 0.8) < 0.01   # the sum said 1.2, capped at 1


def test_disjoint_ops_give_their_sum():
    msg = run([("isend", fmt.KIND_P2P, 0, 0, 30), ("irecv", fmt.KIND_P2P, 0, 40, 70)])
    assert busy(msg) == 10 * 60 * MS
    assert abs(derive.figures(0, msg).wait_share - 0.6) < 0.01


def test_an_op_held_behind_its_elder_adds_nothing():
    # the tracer writes a done op's END after its elder's, the elder ending later
    msg = run([("all_reduce", fmt.KIND_COLLECTIVE, 0, 0, 50), ("all_reduce", fmt.KIND_COLLECTIVE, 0, 10, 40)])
    assert busy(msg) == 10 * 50 * MS


def test_each_communicator_has_its_union_and_the_rank_one_across_them():
    msg = run([("all_reduce", fmt.KIND_COLLECTIVE, 0, 0, 40), ("isend", fmt.KIND_P2P, 7, 20, 50),
               ("irecv", fmt.KIND_P2P, 7, 30, 60)])
    assert (busy(msg, 0), busy(msg, 7), busy(msg)) == (10 * 40 * MS, 10 * 40 * MS, 10 * 60 * MS)
    assert abs(derive.figures(0, msg).wait_share - 0.6) < 0.01


def test_the_hooks_sample_is_scaled_to_all_calls():
    # 1 in 8 device-timed: 10 timed 5 ms calls stand for 80 calls
    clock = Clock()
    window = PerfWindow(window_s=10, clock=clock)
    start = clock.ns
    window.observe(0, fmt.PRODUCER_HOOK, [rec("anchor", fmt.KIND_HOST_FUNC, 1, start)])
    records = []
    for i in range(80):
        timed = i % 8 == 0
        records.append(rec("ncclAllReduce", fmt.KIND_COLLECTIVE, 5 * MS if timed else 0, start + (i + 1) * 12 * MS,
                           flags=fmt.FLAG_DEVICE_TIMED if timed else 0))
    clock.ns = start + 10**9
    window.observe(0, fmt.PRODUCER_HOOK, records)
    msg = window.message(0)
    assert busy(msg) == 10 * 5 * MS
    assert abs(derive.figures(0, msg).wait_share - 0.4) < 0.01   # 80 x 5 ms in 1 s


def test_an_older_agent_without_the_union_reads_the_sum():
    msg = run([("isend", fmt.KIND_P2P, 0, 0, 30), ("irecv", fmt.KIND_P2P, 0, 10, 50)])
    assert abs(derive.figures(0, msg).wait_share - 0.5) < 0.01
    del msg.comm_busy[:]
    assert abs(derive.figures(0, msg).wait_share - 0.7) < 0.01
