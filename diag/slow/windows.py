"""The collector's performance view -> the slow rules' :class:`RankWindow`.

One place reads ``pb.PerfRank`` for the rules, with the same arithmetic as
``diag.perf.derive`` (which ``top`` and the metrics use), so a SLOW line and
the dashboard never disagree about a rank's TFLOP/s or wait.
"""

from __future__ import annotations

from collections import defaultdict

from diag.common import busbw
from diag.perf import derive
from diag.records import format as fmt
from diag.slow.api import CommWindow, RankWindow

GC_NAME = "gc"   # the tracer's host-function record for a garbage collection
_GEMM, _HOST_FUNC, _HOOK = fmt.KIND_GEMM, fmt.KIND_HOST_FUNC, fmt.PRODUCER_HOOK


def group_name(comm_id: int) -> str:
    return '"default"' if comm_id == 0 else f"{comm_id:#x}"


def from_perf(rank: int, node_rank: int, local_rank: int, hostname: str, perf, names=group_name) -> RankWindow:
    """``perf`` is a ``pb.PerfRank``; ``names`` maps a comm id to what users call it.

    One pass over the ops, each field read once: the collector runs this for
    every rank each SLOW pass (100,000 ranks at 12,500 nodes), and reading a
    protobuf field costs about what the arithmetic does. The figures are
    ``diag.perf.derive``'s, in the same order of operations."""
    gemm_ns = gemm_flops_timed = gemm_samples = gemm_count = gemm_flops = gc_ns = 0
    hook, other = [], []   # comm ops of the hook, of the tracer: derive.comm_ops takes the hook's if any
    for op in perf.ops:
        kind = op.kind
        if kind == _GEMM:
            gemm_ns += op.timed_ns
            gemm_flops_timed += op.timed_flops
            gemm_samples += op.timed_count
            gemm_count += op.count
            gemm_flops += op.flops
        elif kind in derive.COMM_KINDS:
            (hook if op.producer == _HOOK else other).append(op)
        elif kind == _HOST_FUNC and op.name == GC_NAME:
            gc_ns += op.timed_ns
    chosen = hook or other   # one producer's
    per_comm: dict[int, list] = defaultdict(list)
    for op in chosen:
        per_comm[op.comm_id].append((op.name, op.comm_size, op.count, op.timed_count, op.timed_ns, op.max_ns,
                                     op.bytes, op.timed_bytes))
    comms = tuple(_comm(comm_id, ops, names, derive.union_ns(perf, chosen[0].producer, comm_id))
                  for comm_id, ops in sorted(per_comm.items()))
    window = perf.window_s
    return RankWindow(
        rank=rank, node_rank=node_rank, local_rank=local_rank, hostname=hostname, span_s=window,
        gemm_tflops=gemm_flops_timed / gemm_ns / 1e3 if gemm_ns else None,
        gemm_samples=gemm_samples, gemm_flops_per_call=gemm_flops / gemm_count if gemm_count else 0.0,
        comms=comms, steps=perf.steps, gc_s=gc_ns / 1e9,
        launches_per_s=perf.launches / window if window > 0 else 0.0)


def _comm(comm_id: int, ops: list[tuple], names, union: float | None) -> CommWindow:
    """``ops``: (name, comm_size, count, timed_count, timed_ns, max_ns, bytes,
    timed_bytes) of one producer's ops on the communicator. ``union``: the
    time with at least one timed call in flight (None: not measured, an older
    agent; the summed time stands in)."""
    count = timed = 0
    wait_ns = typical_ns = 0.0
    busiest, busiest_ns = ops[0], None
    for op in ops:
        _, _, n, timed_n, timed_ns, max_ns, _, _ = op
        count += n
        timed += timed_n
        mean = timed_ns / timed_n if timed_n else 0.0          # derive.summed_ns
        wait_ns += mean * n
        typical_ns += _typical_ns(timed_n, timed_ns, max_ns) * n
        if busiest_ns is None or mean * n > busiest_ns:         # max(): the first of equals
            busiest, busiest_ns = op, mean * n
    if union is not None:
        busy_ns = derive.scaled_busy_ns(union, count, timed, wait_ns)
        if wait_ns > 0:
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
    name, comm_size, n, _, timed_ns, _, nbytes, timed_bytes = busiest
    return CommWindow(
        comm_id=comm_id, comm_name=names(comm_id), op=name, count=count, wait_s=wait_ns / 1e9,
        typical_s=typical_ns / count / 1e9 if count else 0.0,
        busbw_bps=busbw.busbw(name, comm_size, timed_bytes, timed_ns / 1e9) or None,
        bytes_per_op=nbytes / n if n else 0.0)


def _typical_ns(timed_count: int, timed_ns: int, max_ns: int) -> float:
    """Mean of the timed calls without the longest (a checkpoint's one wait)."""
    if timed_count > 1:
        return (timed_ns - max_ns) / (timed_count - 1)
    return timed_ns / timed_count if timed_count else 0.0
