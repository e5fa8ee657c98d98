"""The physical GPUs in the collector's verdicts (docs/gpu.md).

Reads each rank's GpuHealth (RankProgress.gpu, sent by its agent) and:
- says once, at start-up, when two ranks share one GPU or a rank runs on a
  device other than its local rank (``GpuWatch``);
- adds the culprits' GPUs to a HANG, with any XID or fatal ECC error seen on
  them within the window, and writes their nodes to ``faults.json`` next to
  hang.json (diag/faultlist.py format: ``--fault-list`` and the pre-flight
  hook read it, and --hang-action recover leaves the nodes out);
- gives SLOW its cause: the throttle reason NVML reports, or "no throttle
  reported".
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from diag import faultlist
from diag.collector import links
from diag.collector.state import Snapshot
from diag.common import dumpnames, safe_dirs
from diag.common.ranks import fold
from diag.gpu import causes, wire
from diag.gpu.api import NOT_SAMPLED, GpuHealth

log = logging.getLogger("diag.collector")
MAX_NAMED = 4               # ranks spelled out in one start-up line; the rest are counted
CHECK_EVERY_S = 2.0
# The lines are said once, so they wait for the identity the agent's NVML
# match completes (the nvidia-smi index); a device NVML never matches is
# named as it stands after this long.
SETTLE_S = 10.0
# A rank whose reports name no GPU (a CPU job, a rank without the tracer) is
# looked at every CHECK_EVERY_S for this long, then every NAMELESS_EVERY_S:
# each look makes the rank's entry from its node's report, which at 200,000
# ranks every 2 s cost a fifth of the collector's CPU.
NAMELESS_AFTER_S = 60.0
NAMELESS_EVERY_S = 30.0
TOOL = "xpu-diag collector"


def health_of(snap: Snapshot, rank: int) -> GpuHealth | None:
    entry = snap.ranks.get(rank)
    return wire.rank_health(entry.progress) if entry is not None else None


def where(snap: Snapshot, rank: int, node_rank: int, local_rank: int) -> str:
    """``node 0, gpu 0000:1b:00.0 (GPU-8c1f1234..., nvidia-smi index 3)``, or
    ``node 0, local rank 1`` when the rank named no GPU (a CPU job, no tracer)."""
    health = health_of(snap, rank)
    if health is not None and health.identity.known:
        return f"node {node_rank}, {health.identity.phrase()}{shared_with(snap, rank, node_rank, health.identity)}"
    return f"node {node_rank}, local rank {local_rank}"


def shared_with(snap: Snapshot, rank: int, node_rank: int, identity) -> str:
    """`` shared with rank 0`` when other ranks of the node run on the same
    GPU (each gets a share of its SMs and memory: a reason to be slow), else
    "". Reads only the node's ranks."""
    agent = snap.agents.get(node_rank)
    others = []
    for other in agent.ranks if agent is not None else ():
        entry = snap.ranks.get(other)
        if other == rank or entry is None or not entry.progress.HasField("gpu"):
            continue
        if wire.identity_of(entry.progress.gpu.identity).key == identity.key:
            others.append(other)
    return f" shared with rank{'s' if len(others) > 1 else ''} {fold(sorted(others))}" if others else ""


class GpuWatch:
    """Start-up lines about where ranks run; each situation is said once."""

    def __init__(self, say) -> None:
        self._say = say
        self._seen: set[int] = set()               # ranks whose GPU was looked at
        self._first: dict[int, float] = {}         # rank -> when its GPU was first named, still unsettled
        self._said: set[tuple] = set()
        self._nameless: dict[int, float] = {}      # rank -> when it was first looked at and named no GPU
        self._next = self._nameless_next = 0.0

    def tick(self, snap: Snapshot) -> None:
        now = snap.now
        if now < self._next:
            return
        self._next = now + CHECK_EVERY_S
        recheck = now >= self._nameless_next
        if recheck:
            self._nameless_next = now + NAMELESS_EVERY_S
        fresh, ranks, seen, nameless = [], snap.ranks, self._seen, self._nameless
        for rank in ranks:   # the keys: an entry is made only for a rank still looked at
            if rank in seen:
                continue
            since = nameless.get(rank)
            if since is not None and not recheck and now - since >= NAMELESS_AFTER_S:
                continue
            entry = ranks.get(rank)
            if entry is None:
                continue
            identity = wire.identity_of(entry.progress.gpu.identity) if entry.progress.HasField("gpu") else None
            if identity is None or not identity.known:
                nameless.setdefault(rank, now)
                continue
            nameless.pop(rank, None)
            first = self._first.setdefault(rank, now)
            if entry.progress.gpu.nvml == NOT_SAMPLED and now - first < SETTLE_S:
                continue
            self._first.pop(rank, None)
            self._seen.add(rank)
            fresh.append(rank)
        if fresh:
            self._shared(snap)
            self._elsewhere(snap, fresh)

    def _shared(self, snap: Snapshot) -> None:
        by_gpu: dict[tuple, list[int]] = {}
        for rank in self._seen:
            entry = snap.ranks[rank]
            identity = wire.identity_of(entry.progress.gpu.identity)
            by_gpu.setdefault((entry.node_rank, identity.key), []).append(rank)
        for (node, key), ranks in sorted(by_gpu.items()):
            if len(ranks) < 2 or ("share", node, key, len(ranks)) in self._said:
                continue
            self._said.add(("share", node, key, len(ranks)))
            identity = wire.identity_of(snap.ranks[ranks[0]].progress.gpu.identity)
            self._say(f"GPU: ranks {fold(sorted(ranks))} share one GPU on node {node}: {identity.phrase()} "
                      f"(each gets a share of its SMs and memory)")

    def _elsewhere(self, snap: Snapshot, fresh: list[int]) -> None:
        """Ranks whose device is not the one their local rank suggests: by
        nvidia-smi index where NVML gave one, else by CUDA ordinal."""
        odd = []
        for rank in sorted(fresh):
            progress = snap.ranks[rank].progress
            identity = wire.identity_of(progress.gpu.identity)
            number = identity.index if identity.index >= 0 else identity.cuda_device
            if number >= 0 and number != progress.local_rank:
                odd.append(f"rank {rank} (local rank {progress.local_rank}) on {identity.phrase()}")
        if odd:
            more = f"; {len(odd) - MAX_NAMED} more in the ranks' reports" if len(odd) > MAX_NAMED else ""
            self._say(f"GPU: {'; '.join(odd[:MAX_NAMED])}{more}: the local rank is not the GPU's "
                      f"nvidia-smi index (CUDA_VISIBLE_DEVICES or set_device): drain by the bus id")


def _suspects(doc: dict[str, Any], snap: Snapshot) -> list[int]:
    """The ranks a HANG points at: culprits, else the suspects, else every rank."""
    culprits = list(doc.get("culprits") or [])
    if culprits:
        return culprits
    suspects = [s["rank"] for s in doc.get("suspects") or []]
    if suspects:
        return suspects
    if doc.get("ranks") is not None:
        return [row["rank"] for row in doc["ranks"]]
    world = doc.get("world_size", 0)   # the rows are not built yet (watchdog.py): the same ranks from the snapshot
    return sorted(r for r in snap.ranks if r < world)


def annotate_rows(rows: list[dict[str, Any]] | None, snap: Snapshot) -> None:
    """hang.json's ``ranks[].gpu``: each rank's GPU, or None."""
    ranks = snap.ranks
    for row in rows or []:
        entry = ranks.get(row["rank"])
        # The identity only: not the whole GpuHealth (100,000 rows after a HANG).
        row["gpu"] = (wire.identity_of(entry.progress.gpu.identity).to_dict()
                      if entry is not None and entry.progress.HasField("gpu") else None)


def annotate_hang(doc: dict[str, Any], snap: Snapshot, path: str) -> list[faultlist.FaultEntry]:
    """Add the GPUs to hang.json (``ranks[].gpu`` where the rows are built,
    ``gpu_events``) and the culprits' GPU faults to its verdict line; write
    ``faults.json`` when an event there is fatal. Returns the nodes written."""
    annotate_rows(doc.get("ranks"), snap)
    clauses, events, entries = [], [], []
    hostnames = {n: a.hostname for n, a in snap.agents.items()}
    culprits = set(doc.get("culprits") or [])
    for rank in _suspects(doc, snap):
        entry = snap.ranks.get(rank)
        if entry is None or not entry.progress.HasField("gpu"):
            continue
        if not entry.progress.gpu.events and (rank not in culprits or len(clauses) >= MAX_NAMED):
            # Nothing to say of it: skip reading its GPU (every rank when
            # every rank waits; 100,000 culprits when the rest never entered).
            continue
        health = wire.rank_health(entry.progress)
        if health is None or not health.identity.known:
            continue
        if not health.events:
            if rank in culprits and len(clauses) < MAX_NAMED:   # where it runs, and that NVML saw nothing
                quiet = ", no XID or ECC error reported" if health.latest is not None else ""
                shared = shared_with(snap, rank, entry.node_rank, health.identity)
                clauses.append(f"rank {rank} on {health.identity.phrase()}{shared}{quiet}")
            continue
        node = snap.ranks[rank].node_rank
        if len(clauses) < MAX_NAMED:
            clauses.append(f"rank {rank}'s {health.identity.phrase()} reported {causes.fault_clause(health)}")
        for e in health.events:
            events.append({"rank": rank, "node_rank": node, "gpu": health.identity.to_dict(), "kind": e.kind,
                           "code": e.code, "text": e.text, "fatal": e.fatal, "unix_s": round(e.unix_s, 3)})
        fatal = [e for e in health.events if e.fatal]
        if fatal:
            host = hostnames.get(node, "")
            entries.append(faultlist.FaultEntry(host or f"node{node}", f"{health.identity.phrase()}: "
                                                f"{fatal[-1].phrase()} during a HANG", host, node))
    doc["gpu_events"] = events
    # Both ends of a stuck NCCL link (docs/link.md) join the same fault list.
    link_entries, link_records = links.fault_entries(doc, snap)
    if link_entries and not entries:
        clauses.append(f"node(s) {', '.join(dict.fromkeys(e.node for e in link_entries))} on the fault list "
                       + os.path.join(path, dumpnames.FAULTS_JSON))
    if clauses:
        doc["verdict"] = _insert(doc["verdict"], "; ".join(clauses)
                                 + ("; node(s) on the fault list " + os.path.join(path, dumpnames.FAULTS_JSON)
                                    if entries else ""))
    if entries or link_entries:
        write_faults(path, entries + link_entries, events, link_records)
    links.ask_ras(doc, path)
    return entries + link_entries


def _insert(line: str, clause: str) -> str:
    """The clause before the line's closing "; stacks in DIR/" (or at its end)."""
    head, sep, tail = line.rpartition("; stacks in ")
    return f"{head}; {clause}{sep}{tail}" if sep else f"{line}; {clause}"


def write_faults(path: str, entries: list[faultlist.FaultEntry], events: list[dict],
                 extra_records: list[dict] | None = None) -> None:
    """faults.json in the fault-list format; every GPU event is a record (and
    ``extra_records``: the stuck links' evidence)."""
    records = list(extra_records or [])
    records += [{"node": e.node, "gpu": ev["gpu"]["pci_bus_id"], "link": None, "metric": ev["kind"],
                 "value": ev["code"], "unit": "", "verdict": "fail" if ev["fatal"] else "info",
                 "reason": ev["text"], "rule": "gpu-" + ev["kind"]}
                for e in faultlist.merge_entries(entries) for ev in events if ev["node_rank"] == e.node_rank]
    doc = faultlist.to_document(entries, records, tool=TOOL)
    try:   # faultlist.write's format, through safe_dirs: the event dir may sit in a shared --timeline-path
        safe_dirs.write_file(os.path.join(path, dumpnames.FAULTS_JSON),
                             (json.dumps(doc, indent=1) + "\n").encode("utf-8"), fsync=True)
    except OSError as exc:
        safe_dirs.say_once(log.warning, exc)


def slow_cause(snap: Snapshot, rank: int) -> str:
    """The SLOW line's cause clause for ``rank`` ("" when there is no NVML sample)."""
    health = health_of(snap, rank)
    peers = [h for r in snap.ranks if r != rank for h in [health_of(snap, r)] if h is not None]
    return causes.throttle_clause(health, peers)
