"""The collector's performance view as the slow-rank rules' input.

``rank_windows(view)`` turns a ``pb.PerfView`` (what GetPerfView answers, and
what the collector holds per rank) into one ``diag.slow.api.RankWindow`` per
rank, with the same definitions as ``derive`` (docs/metrics.md): GEMM TFLOP/s
from the device-timed samples; per communicator the wait (timed mean x calls)
and p50 of its busiest op, from the hook's ops when the rank has them, else
the tracer's.
"""

from __future__ import annotations

from collections import defaultdict

from diag.common import busbw
from diag.pb import collector_pb2 as pb
from diag.perf import derive
from diag.records import format as fmt
from diag.slow.api import CommWindow, RankWindow


def comm_name(comm_id: int) -> str:
    return '"default"' if comm_id == 0 else f"{comm_id:016x}"


def _comm_windows(perf: pb.PerfRank) -> tuple[CommWindow, ...]:
    by_comm = defaultdict(list)
    for op in derive.comm_ops(perf):
        by_comm[op.comm_id].append(op)
    out = []
    for comm_id, ops in sorted(by_comm.items()):
        wait_ns = sum(op.timed_ns / op.timed_count * op.count for op in ops if op.timed_count)
        main = max(ops, key=lambda op: (op.timed_ns / op.timed_count * op.count
                                        if op.timed_count else 0.0, op.count))
        bw = (busbw.busbw(main.name, main.comm_size, main.timed_bytes, main.timed_ns / 1e9)
              if main.timed_ns and main.kind == fmt.KIND_COLLECTIVE else None)
        out.append(CommWindow(comm_id=comm_id, comm_name=comm_name(comm_id), op=main.name,
                              count=sum(op.count for op in ops), wait_s=wait_ns / 1e9,
                              p50_s=main.p50_ns / 1e9, busbw_bps=bw or None,
                              bytes_per_op=main.bytes / main.count if main.count else 0.0))
    return tuple(out)


def rank_window(view_rank: pb.PerfRankView) -> RankWindow:
    perf = view_rank.perf
    fig = derive.figures(view_rank.rank, perf)
    gemms = [op for op in perf.ops if op.kind == fmt.KIND_GEMM]
    samples = sum(op.timed_count for op in gemms)
    calls = sum(op.count for op in gemms)
    return RankWindow(
        rank=view_rank.rank, node_rank=view_rank.node_rank, local_rank=view_rank.local_rank,
        hostname=view_rank.hostname, span_s=perf.window_s,
        gemm_tflops=fig.gemm_tflops if samples else None, gemm_samples=samples,
        gemm_flops_per_call=sum(op.flops for op in gemms) / calls if calls else 0.0,
        comms=_comm_windows(perf), steps=perf.steps, launches_per_s=fig.launches_per_s)


def rank_windows(view: pb.PerfView) -> dict[int, RankWindow]:
    return {r.rank: rank_window(r) for r in view.ranks}
