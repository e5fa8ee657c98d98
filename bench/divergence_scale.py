"""Divergence analysis at scale: 16,384 simulated ranks of one hung default
group, each with 64 fingerprints (what the agent sends while stuck), one rank
that skipped a collective and ran ahead. Times the collector's whole hang
analysis on the snapshot (decide.analyse: hung groups, never-entered, the
fingerprint comparison, the stuck seq) and the HANG line; prints the figures.

    .venv/bin/python bench/divergence_scale.py --ranks 16384
"""

from __future__ import annotations

import argparse
import time

from diag.collector import verdict
from diag.hang.api import Limits
from diag.hang.decide import analyse
from diag.collector.state import JobState
from diag.pb import collector_pb2 as pb

DEPTH = 64


def rank_progress(rank: int, world: int, skipper: int, stuck: int) -> pb.RankProgress:
    """Seqs 1..stuck started (stuck in flight); the skipper's history is shifted
    by one from the divergence seq on, and it ran 14 ops further."""
    last = stuck + (14 if rank == skipper else 0)
    p = pb.RankProgress(rank=rank, local_rank=rank % 8, world_size=world, pid=10000 + rank, alive=True,
                        last_op="ncclAllReduce")
    comm = p.comms.add(comm_id=0, last_started_seq=last, last_completed_seq=stuck - 1, comm_size=world,
                       lane=pb.OP_KIND_COLLECTIVE, group_name="default")
    diverged = stuck - 14
    comm.recent.first_seq = last - DEPTH + 1
    for seq in range(last - DEPTH + 1, last + 1):
        small = seq == diverged and rank != skipper   # the loss all_reduce the skipper never made
        comm.recent.ops.add(name="ncclAllReduce", bytes=4 if small else (98 << 20),
                            dtype=7 if small else 9, reduce_op=0, peer=-1)
    p.oldest_in_flight.CopyFrom(pb.InFlightOp(name="ncclAllReduce", kind=pb.OP_KIND_COLLECTIVE, comm_id=0,
                                              seq=stuck, age_ns=12_000_000_000, bytes=4))
    return p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=16384)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    world, skipper, stuck = args.ranks, args.ranks // 2 + 1, 113
    state = JobState()
    t = time.perf_counter()
    for node in range(world // 8):
        ranks = [rank_progress(node * 8 + i, world, skipper, stuck) for i in range(8)]
        state.ingest(pb.NodeReport(job_id="bench", node_rank=node, hostname=f"sim{node}", ranks=ranks,
                                   local_world_size=8), 0.0)
    build_s = time.perf_counter() - t
    best = None
    for _ in range(args.repeat):
        t = time.perf_counter()
        findings = analyse(state.snapshot(1.0), Limits(10.0, 60.0))
        line = verdict.hang_line(findings, "/ev")
        took = time.perf_counter() - t
        best = took if best is None else min(best, took)
    [m] = findings.mismatches
    assert m.diverged_seq == stuck - 14 and list(m.minority) == [skipper], (m.diverged_seq, m.minority)
    print(f"ranks={world} fingerprints/rank={DEPTH} reports built in {build_s:.1f} s")
    print(f"hang analysis incl. fingerprint comparison: best {best:.3f} s of {args.repeat} (< 1 s required)")
    print(line[:300])
    return 0 if best < 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
