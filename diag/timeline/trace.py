"""TimelineUploads -> one Trace Event Format document (docs/timeline.md).

The JSON Object Format that Perfetto UI and chrome://tracing load:
``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``.

- One process per rank (pid = rank + 1: some viewers treat pid 0 as the idle
  process), named ``rank N (host, gpu 0000:1b:00.0 (...))`` (``local rank L`` without a GPU) by a ``process_name`` metadata
  event and ordered by rank with ``process_sort_index``.
- Threads are tracks: CPU-side calls (the tracer), device-timed GEMMs,
  device-timed NCCL ops, and hook ops launched but not completed. A track
  whose spans overlap without nesting (async collectives, two CUDA streams)
  is split into lanes, so every track is a proper stack of "X" events.
- ``ts``/``dur`` are microseconds (3 decimals: ns) from ``otherData.
  clock_origin_unix_ns``, a whole second of wall-clock time: absolute unix
  microseconds in a double would keep only quarter-µs steps.
"""

from __future__ import annotations

import datetime
import json

from diag.gpu import wire as gpu_wire
from diag.pb import collector_pb2 as pb
from diag.records import format as fmt

FORMAT_VERSION = 1
KIND_NAMES = {fmt.KIND_KERNEL: "kernel", fmt.KIND_GEMM: "gemm", fmt.KIND_COLLECTIVE: "collective",
              fmt.KIND_P2P: "p2p", fmt.KIND_HOST_FUNC: "host_func"}
# (first tid, track name, cat); lanes take the following tids.
TRACK_CPU = (1, "CPU: torch.distributed calls and host functions", "cpu")
TRACK_GEMM = (101, "GPU: GEMMs (device-timed)", "gpu")
TRACK_NCCL = (201, "GPU: NCCL collectives and p2p (device-timed)", "gpu")
TRACK_LAUNCHED = (301, "GPU: launched, not completed", "in_flight")


def track_of(span: pb.TimelineSpan):
    if span.producer == fmt.PRODUCER_HOOK:
        if span.in_flight:
            return TRACK_LAUNCHED
        return TRACK_GEMM if span.kind == fmt.KIND_GEMM else TRACK_NCCL
    return TRACK_CPU


def build(uploads: list[pb.TimelineUpload], *, job_id: str, request: str,
          nodes_missing=()) -> dict:
    """The whole document; ranks in no upload are simply absent (see
    ``otherData.nodes_missing``)."""
    ranks = _ranks(uploads)
    starts = [s.start_unix_ns for _, r in ranks for s in r.spans]
    origin = (min(starts) // 1_000_000_000) * 1_000_000_000 if starts else 0
    events: list[dict] = []
    for host, rank in ranks:
        events.extend(_rank_events(host, rank, origin))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": _other(uploads, ranks, origin, job_id, request, nodes_missing)}


def dumps(doc: dict) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _ranks(uploads) -> list[tuple[str, pb.TimelineRank]]:
    """(hostname, rank) sorted by rank; a rank sent twice keeps the newer upload."""
    by_rank = {}
    for up in sorted(uploads, key=lambda u: u.collected_unix_ns):
        for rank in up.ranks:
            by_rank[rank.rank] = (up.hostname, rank)
    return [by_rank[r] for r in sorted(by_rank)]


def _rank_events(host: str, rank: pb.TimelineRank, origin: int) -> list[dict]:
    pid = rank.rank + 1
    # The physical GPU where the agent knew it (docs/gpu.md), never the local rank as a "gpu".
    gpu = rank.gpu if rank.HasField("gpu") else None
    where = gpu_phrase(gpu) if gpu is not None and (gpu.pci_bus_id or gpu.uuid) else f"local rank {rank.local_rank}"
    label = f"rank {rank.rank} ({host}, {where})"
    out = [_meta("process_name", pid, None, {"name": label}),
           _meta("process_sort_index", pid, None, {"sort_index": rank.rank})]
    by_track: dict[tuple, list] = {}
    for span in rank.spans:
        by_track.setdefault(track_of(span), []).append(span)
    slices = []
    for track in sorted(by_track):
        base, name, cat = track
        for lane, spans in enumerate(pack_lanes(by_track[track])):
            tid = base + lane
            label = name if lane == 0 else f"{name} ({lane + 1})"
            out.append(_meta("thread_name", pid, tid, {"name": label}))
            out.append(_meta("thread_sort_index", pid, tid, {"sort_index": tid}))
            slices.extend(_slice(s, pid, tid, cat, origin) for s in spans)
    return out + slices


def gpu_phrase(gpu: pb.GpuIdentity) -> str:
    return gpu_wire.identity_of(gpu).phrase()


def pack_lanes(spans) -> list[list]:
    """Spans into lanes in which any two either nest or do not overlap;
    each lane sorted by (start, longest first), as viewers want them."""
    lanes: list[tuple[list, list]] = []   # (spans, stack of open end times)
    for span in sorted(spans, key=lambda s: (s.start_unix_ns, -s.dur_ns)):
        start, end = span.start_unix_ns, span.start_unix_ns + span.dur_ns
        for placed, stack in lanes:
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                placed.append(span)
                stack.append(end)
                break
        else:
            lanes.append(([span], [end]))
    return [placed for placed, _ in lanes]


def _slice(s: pb.TimelineSpan, pid: int, tid: int, cat: str, origin: int) -> dict:
    args = {"kind": KIND_NAMES.get(s.kind, str(s.kind))}
    if s.kind in (fmt.KIND_COLLECTIVE, fmt.KIND_P2P):
        args.update(comm=f"{s.comm_id:#x}", seq=s.seq, bytes=s.bytes)
    elif s.bytes:
        args["bytes"] = s.bytes
    if s.flops and s.kind not in (fmt.KIND_COLLECTIVE, fmt.KIND_P2P):   # there: reduce op and peer
        args["flops"] = s.flops
    if s.device_timed:
        args["device_timed"] = True
    if s.in_flight:
        args["in_flight"] = True
    if s.failed:
        args["failed"] = True
    return {"name": s.name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
            "ts": round((s.start_unix_ns - origin) / 1000, 3), "dur": round(s.dur_ns / 1000, 3),
            "args": args}


def _meta(name: str, pid: int, tid, args: dict) -> dict:
    event = {"name": name, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _other(uploads, ranks, origin, job_id, request, nodes_missing) -> dict:
    when = datetime.datetime.fromtimestamp(origin / 1e9, datetime.timezone.utc)
    return {
        "version": FORMAT_VERSION, "job_id": job_id, "request": request,
        "clock_origin_unix_ns": origin,
        "clock_origin_utc": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "clock": "ts is wall-clock microseconds since clock_origin_unix_ns; each node converted "
                 "CLOCK_MONOTONIC with its own offset (docs/timeline.md)",
        "nodes": [{"node_rank": u.node_rank, "hostname": u.hostname,
                   "realtime_minus_monotonic_ns": u.realtime_minus_monotonic_ns,
                   "window_s": u.window_ns / 1e9, "collected_unix_ns": u.collected_unix_ns,
                   "ranks": sorted(r.rank for r in u.ranks)}
                  for u in sorted(uploads, key=lambda u: u.node_rank)],
        "nodes_missing": sorted(nodes_missing),
        "pids": {str(r.rank): r.pid for _, r in ranks},
        "dropped": {str(r.rank): {"spans": r.dropped_spans, "records": r.dropped_records}
                    for _, r in ranks if r.dropped_spans or r.dropped_records},
    }
