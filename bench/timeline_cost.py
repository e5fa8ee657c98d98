"""What the timeline costs the agent: per record in the sampler, and per answer.

    .venv/bin/python bench/timeline_cost.py [--ranks 8] [--spans 20000]

1. The sampler's work per record, NodeState alone against NodeState plus the
   ring, in alternating blocks (min of each): START/END pairs of hook GEMMs,
   1 in 8 device-timed (the default) and all of them.
2. One answer at the cap: ``--ranks`` ranks with ``--spans`` spans each;
   the snapshot (taken under the agent's lock, so it holds up sampling), the
   TimelineUpload built outside the lock, and the collector's merge into
   Trace Event JSON, with the sizes.
"""

from __future__ import annotations

import argparse
import time

from diag.agent.state import NodeState
from diag.records import format as fmt
from diag.timeline import trace, wire
from diag.timeline.ring import TimelineRing

S = 1_000_000_000


def records(n: int, t0: int, rank_producer: int, timed_every: int = 1):
    out = []
    for i in range(n):
        t = t0 + i * 10_000
        if rank_producer == fmt.PRODUCER_HOOK:
            flags = fmt.FLAG_DEVICE_TIMED if i % timed_every == 0 else 0
            kind, name, seq = fmt.KIND_GEMM, "cublasGemmEx", 0
        else:
            kind, name, flags, seq = fmt.KIND_COLLECTIVE, "all_reduce", 0, i + 1
        out.append(fmt.Record(fmt.EVENT_START, kind, 0, 0, i, 0, seq, t, 0, 64, 0, 1, 8, name))
        out.append(fmt.Record(fmt.EVENT_END, kind, flags, 0, i, 0, seq, t + 5000, 5000, 64, 10**9,
                              1, 8, name))
    return out


def per_record(timed_every: int, blocks: int = 7, n: int = 20_000) -> None:
    best = {"state": float("inf"), "state+ring": float("inf")}
    for block in range(blocks):
        for variant in ("state", "state+ring"):
            # NodeState feeds the ring the records of the regions it owns
            state = NodeState(timeline=TimelineRing(30 * S) if variant == "state+ring" else None)
            header = fmt.Header(4096, 1, 0, 0, 8, fmt.PRODUCER_HOOK, 0, 0, 0)
            state.add_region("r", header)
            recs = records(n, block * S, fmt.PRODUCER_HOOK, timed_every)
            t0 = time.perf_counter_ns()
            state.apply("r", recs)
            best[variant] = min(best[variant], (time.perf_counter_ns() - t0) / len(recs))
    added = best["state+ring"] - best["state"]
    print(f"sampler per hook GEMM record, 1 in {timed_every} device-timed: NodeState {best['state']:.0f} ns, with the ring "
          f"{best['state+ring']:.0f} ns (+{added:.0f} ns, {added / best['state'] * 100:.0f} %)")


def answer(ranks: int, spans: int) -> None:
    ring = TimelineRing(3600 * S, max_spans=spans)
    for r in range(ranks):
        ring.start_rank(fmt.Header(4096, 100 + r, r, r, ranks, fmt.PRODUCER_PYTHON, 0, 0, 0))
        for producer in (fmt.PRODUCER_HOOK, fmt.PRODUCER_PYTHON):
            ring.apply(r, f"{r}-{producer}", producer, records(spans // 2, S, producer))
    t0 = time.perf_counter()
    snaps = ring.snapshot(now_ns=S + spans * 10_000)
    t1 = time.perf_counter()
    up = wire.build_upload(snaps, offset_ns=wire.clock_offset_ns(), job_id="j", request_id="r",
                           node_rank=0, hostname="h", window_ns=ring.window_ns)
    t2 = time.perf_counter()
    data = trace.dumps(trace.build([up], job_id="j", request="r"))
    t3 = time.perf_counter()
    print(f"answer for {ranks} ranks x {spans} spans: snapshot {1e3 * (t1 - t0):.0f} ms (under the "
          f"agent's lock), upload built in {1e3 * (t2 - t1):.0f} ms ({up.ByteSize() / 1e6:.1f} MB), "
          f"collector merge {1e3 * (t3 - t2):.0f} ms ({len(data) / 1e6:.1f} MB of JSON)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--spans", type=int, default=20_000)
    args = p.parse_args()
    per_record(8)   # the hook's default sampling
    per_record(1)   # --hook-time-every 1
    answer(args.ranks, args.spans)


if __name__ == "__main__":
    main()
