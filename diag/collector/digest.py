"""A report relay's reading of a plain NodeReport, for the judge
(ingest.proto ``ReportDigest``; docs/collector.md "Report relays").

At 25,000 nodes the judge parsed 25,000 reports a second and made 200,000
rank entries from them, although between two snapshots (one every 10 s at
that size while nothing nears the timeout) only each rank's newest report is
ever read. A relay parses every report anyway (for the stalled ones, which
go up at once), so it also says what the judge's ingest reads of a plain
one: who sent it, when, which ranks, and what the indexes need (the newest
activity). The judge files that and keeps the bytes; it parses them when it
next takes a snapshot (``state.JobState``), once per node however many
reports came meanwhile.

A report is plain when the judge's ingest would store its ranks and file
nothing: valid, every rank alive, no record dropped, no op in flight for
``FILE_AFTER_NS`` or more. Anything else goes without a digest, and the
judge parses and ingests it at once, as every report before.
"""

from __future__ import annotations

from diag.collector.state import FILE_AFTER_NS, MAX_WORLD_SIZE
from diag.pb import collector_pb2 as pb
from diag.pb import ingest_pb2 as ipb


def digest(report: pb.NodeReport) -> ipb.ReportDigest | None:
    """The digest of a plain ``report``, or None when the judge must read it whole."""
    node = report.node_rank
    if node < 0:
        return None
    ranks = list(report.ranks)
    world = ranks[0].world_size if ranks else 0
    if ranks and not 0 < world <= MAX_WORLD_SIZE:
        return None
    ids, in_flight, min_idle = [], False, None
    for r in ranks:
        rank = r.rank
        if r.world_size != world or not 0 <= rank < world or not r.alive or r.dropped_records:
            return None
        if r.HasField("oldest_in_flight"):
            if r.oldest_in_flight.age_ns >= FILE_AFTER_NS:
                return None
            in_flight = True
        elif min_idle is None or r.idle_ns < min_idle:
            min_idle = r.idle_ns
        ids.append(rank)
    return ipb.ReportDigest(node_rank=node, hostname=report.hostname, agent_pid=report.agent_pid,
                            sent_mono_ns=report.sent_mono_ns, world_size=world, ranks=ids,
                            perf=bool(ranks) and ranks[0].HasField("perf"), in_flight=in_flight,
                            min_idle_ns=min_idle or 0)
