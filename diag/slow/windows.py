"""The collector's performance view -> the slow rules' :class:`RankWindow`.

One place reads ``pb.PerfRank`` for the rules, with the same arithmetic as
``diag.perf.derive`` (which ``top`` and the metrics use), so a SLOW line and
the dashboard never disagree about a rank's TFLOP/s or wait.
"""

from __future__ import annotations

from collections import defaultdict

from diag.perf import derive
from diag.records import format as fmt
from diag.slow.api import CommWindow, RankWindow

GC_NAME = "gc"   # the tracer's host-function record for a garbage collection


def group_name(comm_id: int) -> str:
    return '"default"' if comm_id == 0 else f"{comm_id:#x}"


def from_perf(rank: int, node_rank: int, local_rank: int, hostname: str, perf, names=group_name) -> RankWindow:
    """``perf`` is a ``pb.PerfRank``; ``names`` maps a comm id to what users call it."""
    gemms = [op for op in perf.ops if op.kind == fmt.KIND_GEMM]
    timed_ns = sum(op.timed_ns for op in gemms)
    count = sum(op.count for op in gemms)
    per_comm: dict[int, list] = defaultdict(list)
    for op in derive.comm_ops(perf):
        per_comm[op.comm_id].append(op)
    comms = tuple(_comm(comm_id, ops, names, derive.busy_ns(perf, ops, comm_id))
                  for comm_id, ops in sorted(per_comm.items()))
    gc_s = sum(op.timed_ns for op in perf.ops if op.kind == fmt.KIND_HOST_FUNC and op.name == GC_NAME) / 1e9
    window = perf.window_s
    return RankWindow(
        rank=rank, node_rank=node_rank, local_rank=local_rank, hostname=hostname, span_s=window,
        gemm_tflops=sum(op.timed_flops for op in gemms) / timed_ns / 1e3 if timed_ns else None,
        gemm_samples=sum(op.timed_count for op in gemms),
        gemm_flops_per_call=sum(op.flops for op in gemms) / count if count else 0.0,
        comms=comms, steps=perf.steps, gc_s=gc_s,
        launches_per_s=perf.launches / window if window > 0 else 0.0)


def _comm(comm_id: int, ops, names, busy_ns: float | None) -> CommWindow:
    """``busy_ns``: the time with at least one of ``ops`` in flight (None: not
    measured, an older agent; the summed time stands in)."""
    count = sum(op.count for op in ops)
    wait_ns = derive.summed_ns(ops)
    typical_ns = sum(_typical_ns(op) * op.count for op in ops)
    if busy_ns is not None and wait_ns > 0:
        # The union is the summed time less the overlap. Leaving the window's
        # longest call out of the sum (a checkpoint's one wait) leaves out
        # its share of the union too, taking the overlap as spread over the
        # calls in proportion to their time. Where the longest call overlapped
        # nothing this keeps a little too much (never more than the sum would:
        # the factor is at most 1); subtracting it whole from the union
        # instead would drop the wait of a rank whose longest call was hidden
        # behind others, and a rank that seems to wait less looks the straggler.
        typical_ns *= busy_ns / wait_ns
        wait_ns = busy_ns
    busiest = max(ops, key=lambda op: (op.timed_ns / op.timed_count * op.count) if op.timed_count else 0)
    fig = derive.op_figures(busiest, 1.0)
    return CommWindow(
        comm_id=comm_id, comm_name=names(comm_id), op=busiest.name, count=count, wait_s=wait_ns / 1e9,
        typical_s=typical_ns / count / 1e9 if count else 0.0, busbw_bps=fig.busbw or None,
        bytes_per_op=busiest.bytes / busiest.count if busiest.count else 0.0)


def _typical_ns(op) -> float:
    """Mean of the timed calls without the longest (a checkpoint's one wait)."""
    if op.timed_count > 1:
        return (op.timed_ns - op.max_ns) / (op.timed_count - 1)
    return op.timed_ns / op.timed_count if op.timed_count else 0.0
