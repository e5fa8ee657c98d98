"""Slow-rank rules: pure functions of one window of every rank's figures.

Each rule compares a rank with its own peers, never with a fixed number:

* **slow GPU**: its GEMM TFLOP/s (device-timed samples) is at least
  ``slow`` under the median of its peers of the same role. A role is the
  size class of the rank's GEMMs (log2 of FLOPs per call), so pipeline stages
  and embedding shards that do other GEMMs are not compared with each other.
  Only GEMMs big enough to be device-bound count (``min_gemm_flops``): a tiny
  GEMM's timed interval is mostly the GPU waiting for the host's launch.
* **straggler**: the rank the others wait for. It enters collectives last, so
  its typical time inside them (the time with at least one of them in flight,
  the window's longest call left out, over the span; diag.slow.windows) is the
  shortest of its communicator while its peers' is longer by ``wait_gap`` of
  wall time, on every communicator it is a member of. Calls in flight at once
  (a pipeline's isend/irecv) count once. Leaving the longest call out keeps one
  long wait (a checkpoint written by rank 0 while the others sit in a
  barrier) from counting; a mean rather than a median keeps the wait that DDP
  pays once a step, in its first bucket of several, from being voted out.
* **slow link**: among communicators that do the same op with as many members
  and alike payloads, one whose bus bandwidth is ``link`` under the median of
  the others, while its ranks' GEMMs are healthy.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict

from diag.common.ranks import fold
from diag.slow.api import (RULE_SLOW_GPU, RULE_SLOW_LINK, RULE_STRAGGLER, CommWindow, RankWindow,
                           SlowFinding, Thresholds)


# Device-timed samples carry about a point of timing noise (event clock,
# scheduling of the timed kernels); a rank planted exactly at the threshold is
# named, one a point or more inside it is not.
RESOLUTION = 0.01

def judge(windows: dict[int, RankWindow], th: Thresholds) -> list[SlowFinding]:
    """Every finding of one window. A slow GPU is also its peers' straggler;
    it is reported once, as the slow GPU, with the wait its peers pay."""
    gpus = slow_gpus(windows, th)
    slow_gpu_ranks = {f.ranks[0] for f in gpus}
    stragglers = {f.ranks[0]: (f, wait) for f, wait in _stragglers(windows, th)}
    out = []
    for f in gpus:
        found = stragglers.get(f.ranks[0])
        out.append(f if found is None else dataclasses.replace(f, detail=f"{f.detail}; {found[1]}"))
    out += [f for r, (f, _) in sorted(stragglers.items()) if r not in slow_gpu_ranks]
    out += slow_links(windows, th, slow_gpu_ranks)
    return out


def slow_gpus(windows: dict[int, RankWindow], th: Thresholds) -> list[SlowFinding]:
    roles: dict[int, list[RankWindow]] = defaultdict(list)
    for w in windows.values():
        if (w.gemm_tflops and w.gemm_samples >= th.min_gemm_samples
                and w.gemm_flops_per_call >= th.min_gemm_flops):   # device-bound GEMMs only
            roles[round(math.log2(w.gemm_flops_per_call))].append(w)
    victims = _waiting_ranks(windows, th)
    out = []
    for members in roles.values():
        if len(members) < 2:
            continue
        for w, peers in zip(members, medians_without_each([p.gemm_tflops for p in members])):
            if w.gemm_tflops <= (1.0 - th.slow + RESOLUTION) * peers and w.rank not in victims:
                out.append(SlowFinding(
                    RULE_SLOW_GPU, (w.rank,), w.gemm_tflops, peers, "TFLOP/s",
                    f"GEMM {_num(w.gemm_tflops)} TFLOP/s vs job median {_num(peers)} "
                    f"({100 * (w.gemm_tflops / peers - 1):+.0f}%)"))
    return sorted(out, key=lambda f: f.ranks)


def _waiting_ranks(windows: dict[int, RankWindow], th: Thresholds) -> set[int]:
    """Ranks that wait ``wait_gap`` longer than the job's least-waiting rank.

    A slow GPU sets the pace, so it waits least. A rank that waits for a peer
    has NCCL kernels spinning beside its own GEMMs (DDP overlaps them), which
    costs those GEMMs SMs: on H200 x2 a peer of a host-side straggler read
    -11 % GEMM TFLOP/s with a healthy GPU. Such a rank is a victim, never a
    slow GPU."""
    shares = {r: sum(_typical_wait_share(w, c) for c in w.comms) for r, w in windows.items()}
    if not shares:
        return set()
    least = min(shares.values())
    return {r for r, share in shares.items() if share - least >= th.wait_gap}


def medians_without_each(values: list[float]) -> list[float]:
    """For each value, the median of the others: O(n log n), not O(n^2)
    (16,384 ranks are judged every few seconds)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranked = [values[i] for i in order]
    m = len(values) - 1
    out = [0.0] * len(values)
    for pos, i in enumerate(order):
        def at(j):   # the j-th smallest of the others
            return ranked[j] if j < pos else ranked[j + 1]
        out[i] = at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2
    return out


def _num(value: float) -> str:
    """612 on a GPU; 0.537 on the fake runtime's slow kernels."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _typical_wait_share(w: RankWindow, c: CommWindow) -> float:
    return c.typical_s * c.count / w.span_s if w.span_s > 0 else 0.0


def find_stragglers(windows: dict[int, RankWindow], th: Thresholds) -> list[SlowFinding]:
    """The rank with the shortest typical wait on each communicator, kept if
    its peers wait ``wait_gap`` longer and it is the one on all its comms."""
    return [f for f, _ in _stragglers(windows, th)]


def _stragglers(windows, th) -> list[tuple[SlowFinding, str]]:
    """(finding, what its peers pay) per straggler."""
    members: dict[int, list[tuple[RankWindow, CommWindow]]] = defaultdict(list)
    for w in windows.values():
        for c in w.comms:
            if c.count >= th.min_collectives:
                members[c.comm_id].append((w, c))
    named: dict[int, list[tuple[float, float, CommWindow]]] = defaultdict(list)
    comms_of: dict[int, set[int]] = defaultdict(set)
    for comm_id, pairs in members.items():
        if len(pairs) < 2:
            continue
        shares = sorted(((_typical_wait_share(w, c), w.rank, c) for w, c in pairs), key=lambda t: t[:2])
        for _, rank, _c in shares:
            comms_of[rank].add(comm_id)
        low, rank, comm = shares[0]
        peers = statistics.median(s for s, _, _ in shares[1:])
        if peers - low >= th.wait_gap and shares[1][0] - low >= th.wait_gap / 2:
            named[rank].append((low, peers, comm))
    out = []
    for rank, hits in sorted(named.items()):
        if len(hits) != len(comms_of[rank]):
            continue  # the pace-setter on one group but not another: not the job's straggler
        low, peers, comm = max(hits, key=lambda h: h[1] - h[0])
        paid = f"its peers wait {100 * peers:.0f}% of the time in {comm.op} on group {comm.comm_name}"
        out.append((SlowFinding(
            RULE_STRAGGLER, (rank,), low, peers, "wait share",
            f"{paid}, it waits {100 * low:.0f}%{_host_side(windows[rank], windows)}", comm.comm_id), paid))
    return out


def _host_side(w: RankWindow, windows: dict[int, RankWindow]) -> str:
    """Why a straggler with healthy GEMMs is late: the clue its figures give."""
    others = [p for p in windows.values() if p is not w and p.span_s > 0]
    if not others or w.span_s <= 0:
        return ""
    gc_peers = statistics.median(p.gc_s / p.span_s for p in others)
    if w.gc_s / w.span_s - gc_peers >= 0.05:
        return f"; it spends {100 * w.gc_s / w.span_s:.0f}% of the time in garbage collection"
    per_step = [p.launches_per_s * p.span_s / p.steps for p in others if p.steps]
    if w.steps and per_step:
        mine, theirs = w.launches_per_s * w.span_s / w.steps, statistics.median(per_step)
        if theirs > 0 and mine >= 1.05 * theirs:
            return (f"; it launches {mine:.0f} kernels a step vs {theirs:.0f} for its peers "
                    f"(extra GPU work outside GEMMs and collectives)")
    rate_peers = statistics.median(p.launches_per_s for p in others)
    if rate_peers > 0 and w.launches_per_s < 0.8 * rate_peers:
        return (f"; it launches {w.launches_per_s:.0f} kernels/s vs {rate_peers:.0f} for its peers "
                f"(its host side is late)")
    return ("; its time goes outside GEMMs and collectives (on the host: data loading, Python, CPU; "
            "or in other GPU kernels)")


def slow_links(windows: dict[int, RankWindow], th: Thresholds, slow_gpu_ranks: set[int]) -> list[SlowFinding]:
    comms: dict[int, list[tuple[int, CommWindow]]] = defaultdict(list)
    for w in windows.values():
        for c in w.comms:
            if c.busbw_bps and c.count >= th.min_collectives:
                comms[c.comm_id].append((w.rank, c))
    like: dict[tuple, list[tuple[int, float, tuple[int, ...], CommWindow]]] = defaultdict(list)
    for comm_id, pairs in comms.items():
        ranks = tuple(sorted(r for r, _ in pairs))
        first = pairs[0][1]
        key = (first.op, len(ranks), round(math.log2(max(first.bytes_per_op, 1.0))))
        like[key].append((comm_id, statistics.median(c.busbw_bps for _, c in pairs), ranks, first))
    out = []
    for group in like.values():
        if len(group) < 3:
            continue
        for (comm_id, bw, ranks, comm), peers in zip(group, medians_without_each([g[1] for g in group])):
            if bw <= (1.0 - th.link) * peers and not set(ranks) & slow_gpu_ranks:
                out.append(SlowFinding(
                    RULE_SLOW_LINK, ranks, bw, peers, "B/s",
                    f"{comm.op} on group {comm.comm_name} (ranks {fold(ranks)}) runs at "
                    f"{bw / 1e9:.1f} GB/s busbw vs {peers / 1e9:.1f} GB/s on like groups "
                    f"({100 * (bw / peers - 1):+.0f}%), with healthy GEMMs", comm_id))
    return out
