"""pb.PerfRank -> RankFigures: the one place the view's figures are computed.

- GEMM TFLOP/s: FLOPs of the device-timed GEMMs / their device time
  (docs/kernel_hook.md: unsampled GEMMs carry FLOPs but no duration).
- Estimated device time of an op: mean of its timed calls x all its calls.
- Wait share: time with at least one collective or p2p op in flight (the
  union of their intervals, so ops in flight at once count once) / window
  wall time, from the hook's device-timed ops when the rank has them, else
  from the Python tracer's host-timed calls (never both: they are the same
  calls), plus the time the rank's comm op still in flight has covered
  since (``open_ns``: a hung rank waits, whatever its ENDs said). From an
  older agent, which sends no union, the sum of the ops' estimated times.
- busbw: timed bytes / timed time x the nccl-tests factor (diag.common.busbw);
  None where undefined (one rank, a size not known, nothing timed), and the
  rank's all-reduce figure 0 then.
"""

from __future__ import annotations

from diag.common import busbw
from diag.pb import collector_pb2 as pb
from diag.perf.api import OpFigures, RankFigures
from diag.records import format as fmt

COMM_KINDS = (fmt.KIND_COLLECTIVE, fmt.KIND_P2P)


def _mean_ns(op) -> float:
    return op.timed_ns / op.timed_count if op.timed_count else 0.0


def op_figures(op, window_s: float) -> OpFigures:
    bw = None   # undefined: not a collective/p2p, one rank or an unknown size, nothing timed
    if op.kind in COMM_KINDS:
        bw = busbw.busbw(op.name, op.comm_size, op.timed_bytes, op.timed_ns / 1e9)
    per = 1.0 / window_s if window_s > 0 else 0.0
    return OpFigures(name=op.name, kind=op.kind, comm_id=op.comm_id, comm_size=op.comm_size,
                     count=op.count, per_s=op.count * per, mean_s=_mean_ns(op) / 1e9,
                     p50_s=op.p50_ns / 1e9, p99_s=op.p99_ns / 1e9, max_s=op.max_ns / 1e9,
                     bytes_per_s=op.bytes * per, busbw=bw)


def comm_ops(perf: pb.PerfRank) -> list:
    """The collectives/p2p of one producer: the hook's if any, else the tracer's."""
    ops = [op for op in perf.ops if op.kind in COMM_KINDS]
    hook = [op for op in ops if op.producer == fmt.PRODUCER_HOOK]
    return hook or ops


def summed_ns(ops) -> float:
    """The ops' estimated time, each counted in full: mean of the timed calls x calls."""
    return sum(_mean_ns(op) * op.count for op in ops)


def busy_ns(perf: pb.PerfRank, ops, comm_id: int | None = None) -> float | None:
    """Estimated time with at least one of ``ops`` in flight over the window.

    ``ops``: one producer's comm ops (``comm_ops``), all of them or those of
    communicator ``comm_id``. The union the agent measured over their timed
    calls, scaled by calls / timed calls (the hook times 1 in N; the tracer
    every call), and never more than their summed time. Two hook communicators
    of one group come as two entries: summed, capped by the union across all.
    None when the agent sent no union for them (an older agent; a rank with
    more communicators than the agent keeps unions for; no timed call)."""
    union = union_ns(perf, ops[0].producer if ops else None, comm_id)
    if union is None:
        return None
    return scaled_busy_ns(union, sum(op.count for op in ops), sum(op.timed_count for op in ops), summed_ns(ops))


def union_ns(perf: pb.PerfRank, producer: int | None, comm_id: int | None = None) -> float | None:
    """The union of ``producer``'s timed comm calls the agent measured, on
    communicator ``comm_id`` (None: all of them), capped by the union across
    all; None when it sent none (``busy_ns``)."""
    across = [b.busy_ns for b in perf.comm_busy if b.producer == producer and b.all_comms]
    mine = across if comm_id is None else [
        b.busy_ns for b in perf.comm_busy if b.producer == producer and not b.all_comms and b.comm_id == comm_id]
    if not mine:
        return None
    return min(sum(across), sum(mine))


def scaled_busy_ns(union: float, count: int, timed: int, summed: float) -> float:
    """A union over ``timed`` calls scaled to all ``count``, never more than their ``summed`` time."""
    return min(union * count / timed, summed) if timed else 0.0


def open_ns(perf: pb.PerfRank, producer: int | None) -> int:
    """How much of the window ``producer``'s comm ops still in flight cover
    beyond its union; where it has none open (or None: no comm op ended in
    the window), the most any producer's do (the tracer and the hook see the
    same call)."""
    opens = {b.producer: b.open_ns for b in perf.comm_busy if b.all_comms and b.open_ns}
    return opens[producer] if producer in opens else max(opens.values(), default=0)


def figures(rank: int, perf: pb.PerfRank) -> RankFigures:
    window = perf.window_s
    gemms = [op for op in perf.ops if op.kind == fmt.KIND_GEMM]
    timed_ns = sum(op.timed_ns for op in gemms)
    tflops = sum(op.timed_flops for op in gemms) / timed_ns / 1e3 if timed_ns else 0.0
    comms = comm_ops(perf)
    waited_ns = busy_ns(perf, comms)
    if waited_ns is None:
        waited_ns = summed_ns(comms)
    waited_ns += open_ns(perf, comms[0].producer if comms else None)
    share = min(1.0, waited_ns / (window * 1e9)) if window > 0 else 0.0
    reduces = [op for op in comms if op.name in busbw.ALL_REDUCE and op.timed_ns
               and busbw.defined(op.comm_size)]
    main = max(reduces, key=lambda op: (op.comm_size, op.timed_bytes), default=None)
    return RankFigures(
        rank=rank, window_s=window, gemm_count=sum(op.count for op in gemms),
        gemm_device_s=sum(_mean_ns(op) * op.count for op in gemms) / 1e9, gemm_tflops=tflops,
        launches_per_s=perf.launches / window if window > 0 else 0.0, wait_share=share,
        step_s=perf.step_ns / perf.steps / 1e9 if perf.steps else 0.0, steps=perf.steps,
        allreduce_busbw=op_figures(main, window).busbw if main is not None else 0.0,
        ops=tuple(op_figures(op, window) for op in perf.ops))
