"""Bus bandwidth (nccl-tests factors) and where it is undefined: one rank (a
local copy: a 1-rank all-reduce read 198 TB/s on an H100, issue 20), a size
not known (0), nothing timed."""

import pytest

from diag.common import busbw
from diag.pb import collector_pb2 as pb
from diag.perf import derive
from diag.records import format as fmt


@pytest.mark.parametrize("op,n,want", [("all_reduce", 4, 1.5), ("ncclAllReduce", 2, 1.0),
                                       ("ncclAllGather", 4, 0.75), ("reduce_scatter", 8, 0.875),
                                       ("ncclBroadcast", 4, 1.0), ("ncclSend", 2, 1.0)])
def test_nccl_tests_factors(op, n, want):
    assert busbw.factor(op, n) == want
    assert busbw.busbw(op, n, 1e9, 0.5) == pytest.approx(2e9 * want)


@pytest.mark.parametrize("n", [1, 0])
def test_undefined_below_two_ranks(n):
    assert not busbw.defined(n) and busbw.factor("all_reduce", n) == 0.0
    assert busbw.busbw("ncclAllReduce", n, 1e9, 0.001) is None


def test_nothing_timed_is_none():
    assert busbw.busbw("ncclAllReduce", 8, 1e9, 0.0) is None


def _op(size, timed_ns=10**6):
    return pb.PerfOp(name="ncclAllReduce", kind=fmt.KIND_COLLECTIVE, producer=fmt.PRODUCER_HOOK,
                     comm_size=size, count=10, timed_count=10 if timed_ns else 0,
                     timed_ns=timed_ns, bytes=10 * 2**20, timed_bytes=10 * 2**20 if timed_ns else 0)


def test_the_view_has_no_busbw_for_one_rank_and_the_rank_figure_is_zero():
    perf = pb.PerfRank(window_s=10, ops=[_op(1)])
    fig = derive.figures(0, perf)
    assert fig.ops[0].busbw is None and fig.allreduce_busbw == 0.0
    perf = pb.PerfRank(window_s=10, ops=[_op(1), _op(2)])   # the 2-rank one is the rank's figure
    fig = derive.figures(0, perf)
    assert fig.ops[0].busbw is None and fig.ops[1].busbw == pytest.approx(10 * 2**20 / 1e-3 * 1.0)
    assert fig.allreduce_busbw == fig.ops[1].busbw
