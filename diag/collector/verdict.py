"""Findings -> the one ``HANG: ...`` line and the hang.json document.

Rank sets are folded (``0-1,3``) so a verdict about 16,384 ranks stays one
readable line; the culprits (ranks the others wait for) come right after the
hung ops, as in::

    HANG: ranks 0-1,3 in all_reduce (group 0, seq 41) for 12.1 s; rank 2 not in any collective; stacks in DIR/
"""

from __future__ import annotations

from typing import Any

from diag.collector.api import KIND_NAMES, Findings, HungGroup, OpKey
from diag.collector.rules import NOT_IN_ANY, in_flight_age
from diag.collector.state import Snapshot
from diag.common.ranks import fold

HANG_JSON_VERSION = 1
MAX_GROUPS_IN_LINE = 3
MAX_SUSPECT_CLAUSES = 4


def ranks_phrase(ranks) -> str:
    ranks = list(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {fold(ranks)}"


_KIND_WORDS = {1: "kernel", 2: "gemm", 5: "host function"}


def op_phrase(op: OpKey) -> str:
    if op.is_comm_op:
        return f"{op.name} (group {op.comm_id}, seq {op.seq})"
    return f"{_KIND_WORDS.get(op.kind, 'op')} {op.name}"


def _group_phrase(g: HungGroup) -> str:
    return f"{ranks_phrase(g.ranks)} in {op_phrase(g.op)} for {g.max_age_s:.1f} s"


def _explain(findings: Findings) -> list[str]:
    """Suspect clauses, ranks grouped by reason so the line stays short."""
    by_reason: dict[str, list[int]] = {}
    behind = {n.rank: n for n in findings.never_entered}
    for s in findings.suspects:
        reason = s.reason
        if reason == NOT_IN_ANY and s.rank in behind:
            n = behind[s.rank]
            reason = f"{NOT_IN_ANY} (at seq {n.last_started_seq} on group {n.op.comm_id})"
        elif reason.startswith("agent on node"):
            reason = "silent (agent stopped reporting)"
        by_reason.setdefault(reason, []).append(s.rank)
    ordered = sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    clauses = [f"{ranks_phrase(r)} {reason}" for reason, r in ordered[:MAX_SUSPECT_CLAUSES]]
    rest = sorted(r for _, ranks in ordered[MAX_SUSPECT_CLAUSES:] for r in ranks)
    if rest:
        clauses.append(f"{ranks_phrase(rest)} not waiting either (see hang.json)")
    if findings.missing_ranks:
        clauses.append(f"{ranks_phrase(findings.missing_ranks)} never reported")
    return clauses


def hang_line(findings: Findings, event_dir: str) -> str:
    """The one verdict line; starts with ``HANG: ``."""
    groups = [_group_phrase(g) for g in findings.hung[:MAX_GROUPS_IN_LINE]]
    if len(findings.hung) > MAX_GROUPS_IN_LINE:
        groups.append(f"{len(findings.hung) - MAX_GROUPS_IN_LINE} more hung ops in hang.json")
    clauses = groups + _explain(findings)
    if not findings.culprits:
        clauses.append("no rank is behind: every reporting rank waits")
    return f"HANG: {'; '.join(clauses)}; stacks in {event_dir.rstrip('/')}/"


def silent_line(agent) -> str:
    return (f"SILENT: {ranks_phrase(agent.ranks) if agent.ranks else 'no ranks'} on node {agent.node_rank} "
            f"({agent.hostname or '?'}): agent sent no report for {agent.silent_for_s:.1f} s")


def dropped_line(dropping: dict[int, int]) -> str:
    """``dropping``: rank -> cumulative records dropped (non-zero only)."""
    return (f"DROPPED: {ranks_phrase(sorted(dropping))} dropped {sum(dropping.values())} progress records "
            f"(ring full; the op counts under-report); raise XPU_TIMER_RING_CAPACITY")


def _rank_row(rank: int, entry, snap: Snapshot, hostnames: dict[int, str], comm_id: int) -> dict[str, Any]:
    p = entry.progress
    row: dict[str, Any] = {"rank": rank, "node_rank": entry.node_rank, "hostname": hostnames.get(entry.node_rank, ""),
                           "pid": p.pid, "op": None, "kind": None, "comm_id": None, "seq": None,
                           "in_flight_s": None, "last_op": p.last_op or None,
                           "dropped_records": p.dropped_records}
    age = in_flight_age(entry, snap.now)
    if age is not None:
        op = p.oldest_in_flight
        row.update(op=op.name, kind=KIND_NAMES.get(op.kind, str(op.kind)), comm_id=op.comm_id, seq=op.seq,
                   in_flight_s=round(age, 3))
    row["last_completed_seq"] = next((c.last_completed_seq for c in p.comms if c.comm_id == comm_id), None)
    row["last_started_seq"] = next((c.last_started_seq for c in p.comms if c.comm_id == comm_id), None)
    return row


def hang_document(findings: Findings, snap: Snapshot, *, job_id: str, event_id: str, event_dir: str,
                  declared_unix: float, timeout_s: float) -> dict[str, Any]:
    """hang.json (docs/event-dir.md, version 1) minus "dumps", which the event
    store fills in as the stack files arrive."""
    hostnames = {n: a.hostname for n, a in snap.agents.items()}
    # Seq columns refer to the group of the largest hung collective (the one the culprits are behind on).
    comm_id = next((g.op.comm_id for g in findings.hung if g.op.is_comm_op), 0)
    return {
        "version": HANG_JSON_VERSION,
        "job_id": job_id,
        "event_id": event_id,
        "declared_unix": round(declared_unix, 3),
        "reason": "hung_op",   # or "idle" (diag/collector/idle.py)
        "timeout_s": timeout_s,
        "world_size": findings.world_size,
        "verdict": hang_line(findings, event_dir),
        "hung_ranks": findings.hung_ranks,
        "hung_ops": [{"op": g.op.name, "kind": KIND_NAMES.get(g.op.kind, str(g.op.kind)), "comm_id": g.op.comm_id,
                      "seq": g.op.seq, "ranks": list(g.ranks), "max_in_flight_s": round(g.max_age_s, 3)}
                     for g in findings.hung],
        "culprits": findings.culprits,
        "suspects": [{"rank": s.rank, "reason": s.reason, "last_op": s.last_op,
                      "idle_s": None if s.idle_s is None else round(s.idle_s, 3)} for s in findings.suspects],
        "never_entered": [{"rank": n.rank, "op": n.op.name, "comm_id": n.op.comm_id, "seq": n.op.seq,
                           "last_started_seq": n.last_started_seq} for n in findings.never_entered],
        "silent_ranks": findings.silent_ranks,
        "missing_ranks": list(findings.missing_ranks),
        "ranks": [_rank_row(r, e, snap, hostnames, comm_id) for r, e in sorted(snap.ranks.items())
                  if r < findings.world_size],
    }
