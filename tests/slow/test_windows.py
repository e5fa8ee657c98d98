"""The SLOW rules' window of a rank (``diag.slow.windows.from_perf``) reads
the perf view in one pass for speed; its figures must stay those of
``diag.perf.derive``, which ``top`` and /metrics show, so a SLOW line and the
dashboard never disagree. Seeded random windows of every shape: GEMMs,
collectives and p2p of both producers on several communicators, untimed
ops, unions sent or not."""

from __future__ import annotations

import random

import pytest

from diag.common import busbw
from diag.pb import collector_pb2 as pb
from diag.perf import derive
from diag.records import format as fmt
from diag.slow import windows

NAMES = ("ncclAllReduce", "all_reduce", "ncclAllGather", "isend", "irecv", "cublasGemmEx", "gc", "optimizer.step")
KINDS = (fmt.KIND_GEMM, fmt.KIND_COLLECTIVE, fmt.KIND_P2P, fmt.KIND_HOST_FUNC)
PRODUCERS = (fmt.PRODUCER_PYTHON, fmt.PRODUCER_HOOK)


def _window(rnd: random.Random) -> pb.PerfRank:
    perf = pb.PerfRank(window_s=rnd.choice([0.0, 5.0, 60.0]), launches=rnd.randrange(10**6), steps=rnd.randrange(99))
    for _ in range(rnd.randrange(8)):
        timed = rnd.choice([0, 1, 2, 100])
        perf.ops.add(name=rnd.choice(NAMES), kind=rnd.choice(KINDS), producer=rnd.choice(PRODUCERS),
                     comm_id=rnd.choice([0, 7, 9]), comm_size=rnd.choice([0, 1, 2, 16]),
                     count=rnd.choice([0, timed, 8 * timed]), timed_count=timed,
                     timed_ns=rnd.randrange(1, 10**10) if timed else 0, max_ns=rnd.randrange(10**9),
                     bytes=rnd.randrange(10**9), timed_bytes=rnd.randrange(10**8),
                     flops=rnd.randrange(10**12), timed_flops=rnd.randrange(10**11))
    for _ in range(rnd.randrange(4)):
        perf.comm_busy.add(producer=rnd.choice(PRODUCERS), all_comms=rnd.random() < 0.5,
                           comm_id=rnd.choice([0, 7, 9]), busy_ns=rnd.randrange(10**10))
    return perf


@pytest.mark.parametrize("seed", range(4))
def test_the_slow_window_has_the_figures_top_shows(seed):
    rnd = random.Random(seed)
    compared = 0
    for _ in range(500):
        perf = _window(rnd)
        w = windows.from_perf(5, 1, 2, "h", perf)
        shown = derive.figures(5, perf)
        assert (w.launches_per_s, w.steps) == (shown.launches_per_s, shown.steps)
        assert (w.gemm_tflops or 0.0) == shown.gemm_tflops
        comm_ops = derive.comm_ops(perf)
        assert [c.comm_id for c in w.comms] == sorted({op.comm_id for op in comm_ops})
        for c in w.comms:
            ops = [op for op in comm_ops if op.comm_id == c.comm_id]
            summed = derive.summed_ns(ops)
            busy = derive.busy_ns(perf, ops, c.comm_id)
            assert c.wait_s == (busy if busy is not None and summed > 0 else summed) / 1e9
            assert c.count == sum(op.count for op in ops)
            busiest = max(ops, key=lambda op: op.timed_ns / op.timed_count * op.count if op.timed_count else 0)
            assert c.op == busiest.name
            assert c.busbw_bps == (derive.op_figures(busiest, 1.0).busbw or None)
            if c.busbw_bps is not None:
                assert busbw.defined(busiest.comm_size)
            compared += 1
    assert compared > 500   # most windows had a communicator to compare
