"""Ring snapshots to TimelineUpload, on the agent's host.

Records carry CLOCK_MONOTONIC, which means nothing on another host. The
agent converts every span to wall-clock (CLOCK_REALTIME) ns with one offset
per host, read when it answers: all ranks of a node share one monotonic
clock, so one offset serves them all, and reading it now (rather than from
the region headers' start_unix_ns/start_mono_ns pair, taken at worker start)
follows any step NTP made to the wall clock since. docs/timeline.md says
what error is left.
"""

from __future__ import annotations

import time

from diag.pb import collector_pb2 as pb
from diag.records import format as fmt
from diag.timeline.api import RankSnapshot, Span


def clock_offset_ns(reads: int = 5) -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC, from the tightest of a few paired
    reads (a preemption between the two reads would skew one of them)."""
    best = None
    for _ in range(reads):
        m0 = time.monotonic_ns()
        r = time.time_ns()
        m1 = time.monotonic_ns()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, r - (m0 + m1) // 2)
    return best[1]


def build_upload(snapshots: list[RankSnapshot], *, offset_ns: int, job_id: str,
                 request_id: str, node_rank: int, hostname: str,
                 window_ns: int) -> pb.TimelineUpload:
    msg = pb.TimelineUpload(job_id=job_id, request_id=request_id, node_rank=node_rank,
                            hostname=hostname, realtime_minus_monotonic_ns=offset_ns,
                            window_ns=window_ns, collected_unix_ns=time.time_ns())
    for snap in snapshots:
        m = snap.meta
        rank = msg.ranks.add(rank=m.rank, local_rank=m.local_rank, world_size=m.world_size,
                             pid=m.pid, dropped_spans=snap.dropped_spans,
                             dropped_records=snap.dropped_records)
        for span in snap.spans:
            _add(rank.spans, span, offset_ns, False)
        for span in snap.in_flight:
            _add(rank.spans, span, offset_ns, True)
    return msg


def _add(spans, s: Span, offset_ns: int, in_flight: bool) -> None:
    spans.add(name=s.name, kind=s.kind, producer=s.producer,
              device_timed=bool(s.flags & fmt.FLAG_DEVICE_TIMED) and not in_flight,
              in_flight=in_flight, failed=bool(s.flags & fmt.FLAG_FAILED),
              start_unix_ns=s.start_ns + offset_ns, dur_ns=max(0, s.end_ns - s.start_ns),
              comm_id=s.comm_id, seq=s.seq, bytes=s.nbytes, flops=s.flops)
