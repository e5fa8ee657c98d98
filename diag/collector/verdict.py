"""The verdict (diag/hang/decide.py's Findings, or the idle rule's stall) ->
the one ``HANG: ...`` line and the hang.json document, rendered here alone:
:func:`declaration` when the hang is declared, :func:`complete` with the
per-rank rows after the line.

Rank sets are folded (``0-1,3``) so a verdict about 16,384 ranks stays one
readable line; the culprits (ranks the others wait for) come right after the
hung ops, as in::

    HANG: ranks 0-1,3 in all_reduce (group 0, seq 41) for 12.1 s; rank 2 not in any collective; stacks in DIR/
"""

from __future__ import annotations

import logging
from typing import Any

from diag.collector import gpus, links
from diag.collector.events import stacks_not_written
from diag.hang.api import KIND_COLLECTIVE, KIND_NAMES, KIND_P2P, Findings, HungGroup, IdleStall, Mismatch, OpKey
from diag.hang.not_in_collective import NOT_IN_ANY
from diag.hang.progress import comm_lane, in_flight_age
from diag.collector.state import Snapshot
from diag.common.ranks import fold
from diag.link import analysis as link_analysis

log = logging.getLogger("diag.collector")
HANG_JSON_VERSION = 1
MAX_GROUPS_IN_LINE = 3
MAX_SUSPECT_CLAUSES = 4
MAX_LAST_OPS_IN_LINE = 3


def ranks_phrase(ranks) -> str:
    ranks = list(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {fold(ranks)}"


_KIND_WORDS = {1: "kernel", 2: "gemm", 5: "host function"}


def op_phrase(op: OpKey, findings: Findings | None = None) -> str:
    """``all_reduce (group "default" (ranks 0-3), seq 41)``: the group by the
    name users know where one is known, and the exact stuck seq where the
    members' completions give it (docs/collector.md)."""
    if not op.is_comm_op:
        return f"{_KIND_WORDS.get(op.kind, 'op')} {op.name}"
    label = findings.label(op.comm_id) if findings else None
    stuck = findings.stuck_at(op) if findings else None
    name, seq = (stuck.name, stuck.seq) if stuck else (op.name, op.seq)
    lane = " p2p" if op.kind == KIND_P2P else ""
    # The tracer does not number p2p ops: no seq rather than a false "seq 0".
    where = f"{lane} seq {seq}" if seq else lane
    return f"{name} (group {label.phrase() if label else op.comm_id},{where})"


def _group_phrases(findings: Findings) -> list[str]:
    """One clause per hung op. Ranks whose reported ops differ only in a seq
    that the stuck seq corrects (one burst, completion known per burst) are
    one op: their clauses merge."""
    merged: dict[str, tuple[list[int], float]] = {}
    for g in findings.hung:
        ranks, age = merged.setdefault(op_phrase(g.op, findings), ([], 0.0))
        merged[op_phrase(g.op, findings)] = (ranks + list(g.ranks), max(age, g.max_age_s))
    return [f"{ranks_phrase(sorted(ranks))} in {phrase} for {age:.1f} s" for phrase, (ranks, age) in merged.items()]


def _explain(findings: Findings) -> list[str]:
    """Suspect clauses, ranks grouped by reason so the line stays short."""
    by_reason: dict[str, list[int]] = {}
    behind = {n.rank: n for n in findings.never_entered}
    where: dict[tuple[int, int], str] = {}   # (seq, group) -> the reason: made once, not once a rank
    for s in findings.suspects:
        reason = s.reason
        if reason == NOT_IN_ANY and s.rank in behind:
            n = behind[s.rank]
            reason = where.get(key := (n.last_started_seq, n.op.comm_id))
            if reason is None:
                label = findings.label(n.op.comm_id)
                reason = where[key] = (f"{NOT_IN_ANY} (at seq {n.last_started_seq} on group "
                                       f"{label.short() if label else n.op.comm_id})")
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


def hang_line(findings: Findings, event_dir: str, link: str = "", coords: str = "", dropped: str = "") -> str:
    """The one verdict line; starts with ``HANG: ``. ``link``: the stuck-link
    clause (docs/link.md), after "every reporting rank waits"; ``coords``:
    the culprits' parallel coordinates (:func:`coords_clause`); ``dropped``:
    whose records are incomplete (:func:`dropped_clause`), last."""
    groups = _group_phrases(findings)
    if len(groups) > MAX_GROUPS_IN_LINE:
        groups = groups[:MAX_GROUPS_IN_LINE] + [f"{len(groups) - MAX_GROUPS_IN_LINE} more hung ops in hang.json"]
    clauses = groups + [m.summary for m in findings.mismatches if m.summary] + _explain(findings)
    if findings.deadlock is not None:
        clauses.append(deadlock_clause(findings))
    if coords:
        clauses.append(coords)
    if findings.deadlock is not None and not findings.culprits:
        clauses.append(findings.deadlock.undecided)
    elif not findings.culprits:
        clauses.append("no rank is behind: every reporting rank waits" if not findings.mismatches
                       else "no rank is behind")
    if link:
        clauses.append(link)
    proof = verdict_rule(findings)
    if proof is not None:
        clauses.append(f"rule {proof.rule}: {proof.evidence}")
    if dropped:
        clauses.append(dropped)
    return f"HANG: {'; '.join(clauses)}; stacks in {event_dir.rstrip('/')}/"


def _group_short(findings: Findings, comm_id: int) -> str:
    label = findings.label(comm_id)
    return label.short() if label else f"group {comm_id}"


def deadlock_clause(findings: Findings) -> str:
    """``deadlock: ranks 0,2 in "default" wait for rank 1, rank 1 in "stats"
    for ranks 0,2; rank 1 broke the order of its earlier steps (ran
    all_reduce on "stats" where they run all_reduce on "default")``."""
    d = findings.deadlock
    waits = [f"{ranks_phrase(w.ranks)} in {_group_short(findings, w.op.comm_id)} wait for {ranks_phrase(w.waits_for)}"
             for w in d.waits[:MAX_GROUPS_IN_LINE]]
    # Not blocked, the cycle is only what the waits look like now: a rank
    # of it computes, and may still join the op the others wait in.
    lead = "deadlock: " if d.blocked else "waits in a cycle, not every rank blocked (some compute): "
    clause = lead + ", ".join(waits) + (" ..." if len(d.waits) > MAX_GROUPS_IN_LINE else "")
    by_why: dict[str, list[int]] = {}
    for rank, o in d.broke.items():
        ran = f"{o.actual[1]} on {_group_short(findings, o.actual[0])}"
        expected = f"{o.expected[1]} on {_group_short(findings, o.expected[0])}"
        by_why.setdefault(f"ran {ran} where its earlier steps run {expected}", []).append(rank)
    for why, ranks in list(by_why.items())[:MAX_SUSPECT_CLAUSES]:
        clause += f"; {ranks_phrase(sorted(ranks))} broke the order of {'its' if len(ranks) == 1 else 'their'} earlier steps ({why})"
    return clause


def verdict_rule(findings: Findings):
    """The rule that made the verdict (diag/hang/decide.py: timeout,
    diverged, exited, blocked, ...) and its evidence; None when the findings
    were not decided (tests, tools reading old events)."""
    return findings.verdict


MAX_COORDS_SHOWN = 4


def coords_clause(findings: Findings, snap: Snapshot) -> str:
    """``rank 1 is tp 1, pp 0, dp 0``: where the culprits sit in the job's
    parallel layout, for the first few with named groups."""
    said = []
    for rank in findings.culprits[:MAX_COORDS_SHOWN]:
        entry = snap.ranks.get(rank)
        coords = entry.progress.parallel_coords if entry is not None else ""
        if coords:
            said.append(f"rank {rank} is {coords}")
    return "; ".join(said)


def silent_line(agent) -> str:
    return (f"SILENT: {ranks_phrase(agent.ranks) if agent.ranks else 'no ranks'} on node {agent.node_rank} "
            f"({agent.hostname or '?'}): agent sent no report for {agent.silent_for_s:.1f} s")


def dropped_clause(dropping: dict[int, int]) -> str:
    """The HANG line's word on ranks whose rings overflowed (``dropping``:
    rank -> records dropped, non-zero only): what they did is known in part.
    Their ops in flight and last seqs are not in doubt (a full ring never
    drops the END of an op whose START went in, docs/records.md)."""
    if not dropping:
        return ""
    return (f"{ranks_phrase(sorted(dropping))} dropped {sum(dropping.values())} progress records "
            f"(ring full): their op counts and fingerprints are incomplete")


def dropped_line(dropping: dict[int, int]) -> str:
    """``dropping``: rank -> cumulative records dropped (non-zero only)."""
    return (f"DROPPED: {ranks_phrase(sorted(dropping))} dropped {sum(dropping.values())} progress records "
            f"(ring full; the op counts under-report); raise XPU_TIMER_RING_CAPACITY")


def group_name(findings: Findings, comm_id: int, progress=None) -> str | None:
    """The group's name as the HANG line gives it ("default", torch's
    group_desc, "pg N"), from the findings or the rank's own report; None
    where no producer named it (the line then says the id)."""
    label = findings.label(comm_id)
    if label is not None and label.name:
        return label.name
    for comm in progress.comms if progress is not None else ():
        if comm.comm_id == comm_id and comm.group_name:
            return comm.group_name
    return None


def _rank_row(rank: int, entry, snap: Snapshot, hostnames: dict[int, str], comm_id: int,
              lane: int, findings: Findings) -> dict[str, Any]:
    p = entry.progress
    row: dict[str, Any] = {"rank": rank, "node_rank": entry.node_rank, "hostname": hostnames.get(entry.node_rank, ""),
                           "pid": p.pid, "op": None, "kind": None, "comm_id": None, "group": None, "seq": None,
                           "in_flight_s": None, "last_op": p.last_op or None,
                           "dropped_records": p.dropped_records}
    age = in_flight_age(entry, snap.now)
    if age is not None:
        op = p.oldest_in_flight
        row.update(op=op.name, kind=KIND_NAMES.get(op.kind, str(op.kind)), comm_id=op.comm_id, seq=op.seq,
                   group=group_name(findings, op.comm_id, p) if op.kind in (KIND_COLLECTIVE, KIND_P2P) else None,
                   in_flight_s=round(age, 3))
    comm = comm_lane(p, comm_id, lane)
    row["last_completed_seq"] = None if comm is None else comm.last_completed_seq
    row["last_started_seq"] = None if comm is None else comm.last_started_seq
    return row


def hang_document(findings: Findings, snap: Snapshot, *, job_id: str, event_id: str, event_dir: str,
                  declared_unix: float, timeout_s: float, rows: bool = True,
                  dropped: dict[int, int] | None = None) -> dict[str, Any]:
    """hang.json (docs/event-dir.md, version 1) minus "dumps", which the event
    store fills in as the stack files arrive. ``rows=False``: "ranks",
    "suspects" and "never_entered" are None, for :func:`rank_rows` and
    :func:`rank_sections` to fill in later (at 100,000 ranks the rows cost a
    second the HANG line must not wait for: the line needs none of them).
    ``dropped``: rank -> progress records dropped, the ranks that dropped any."""
    link = links.find(findings, snap)   # empty unless every member waits at one seq and sent link data
    dropped = dropped or {}
    return {
        "version": HANG_JSON_VERSION,
        "job_id": job_id,
        "event_id": event_id,
        "declared_unix": round(declared_unix, 3),
        "reason": "hung_op",   # or "idle" (idle_fields)
        "timeout_s": timeout_s,
        "rule": _rule_field(findings),
        "world_size": findings.world_size,
        "verdict": hang_line(findings, event_dir, link_analysis.clause(link), coords_clause(findings, snap),
                             dropped_clause(dropped)),
        "records_dropped": {"ranks": sorted(dropped), "total": sum(dropped.values())} if dropped else None,
        "hung_ranks": findings.hung_ranks,
        "hung_ops": [_hung_op(g, findings) for g in findings.hung],
        "culprits": findings.culprits,
        **(rank_sections(findings) if rows else dict.fromkeys(RANK_SECTIONS)),
        "groups": [{"comm_id": g.comm_id, "name": g.name or None, "ranks": g.ranks} for g in findings.groups],
        "mismatch": mismatch_section(findings.mismatches),
        "deadlock": deadlock_section(findings),
        "silent_ranks": findings.silent_ranks,
        "missing_ranks": list(findings.missing_ranks),
        "link": link_analysis.document(link) if link else None,
        "ranks": rank_rows(findings, snap) if rows else None,
    }


def _rule_field(findings: Findings) -> dict | None:
    proof = verdict_rule(findings)
    return {"name": proof.rule, "evidence": proof.evidence} if proof is not None else None


RANK_SECTIONS = ("suspects", "never_entered")


def rank_sections(findings: Findings) -> dict[str, list[dict[str, Any]]]:
    """hang.json's "suspects" and "never_entered": a row each, 100,000 of them
    when the rest of a job never entered the op, so built after the line."""
    return {
        "suspects": [{"rank": s.rank, "reason": s.reason, "last_op": s.last_op,
                      "idle_s": None if s.idle_s is None else round(s.idle_s, 3)} for s in findings.suspects],
        "never_entered": [{"rank": n.rank, "op": n.op.name, "comm_id": n.op.comm_id,
                           "group": group_name(findings, n.op.comm_id), "seq": n.op.seq,
                           "last_started_seq": n.last_started_seq} for n in findings.never_entered],
    }


def rank_rows(findings: Findings, snap: Snapshot) -> list[dict[str, Any]]:
    """hang.json's "ranks": one row per rank of the world, by rank."""
    hostnames = {n: a.hostname for n, a in snap.agents.items()}
    # Seq columns refer to the group of the largest hung collective (the one the culprits are behind on).
    first = next((g.op for g in findings.hung if g.op.is_comm_op), None)
    comm_id, lane = (first.comm_id, first.kind) if first else (0, KIND_COLLECTIVE)
    return [_rank_row(r, e, snap, hostnames, comm_id, lane, findings) for r, e in sorted(snap.ranks.items())
            if r < findings.world_size]


def _hung_op(g: HungGroup, findings: Findings) -> dict[str, Any]:
    label = findings.label(g.op.comm_id)
    stuck = findings.stuck_at(g.op) if g.op.is_comm_op else None
    return {"op": g.op.name, "kind": KIND_NAMES.get(g.op.kind, str(g.op.kind)), "comm_id": g.op.comm_id,
            "group": label.name if label and label.name else None, "seq": g.op.seq,
            "stuck_seq": stuck.seq if stuck else None, "ranks": list(g.ranks),
            "max_in_flight_s": round(g.max_age_s, 3)}


def mismatch_section(mismatches: tuple[Mismatch, ...]) -> dict[str, Any] | None:
    """hang.json's ``mismatch`` (docs/event-dir.md): a one-line ``summary``
    and, per hung group whose members disagree, the evidence."""
    if not mismatches:
        return None
    return {"summary": "; ".join(m.summary for m in mismatches if m.summary),
            "groups": [_mismatch_entry(m) for m in mismatches]}


def _mismatch_entry(m: Mismatch) -> dict[str, Any]:
    if m.skips:
        note = "; ".join(f"{ranks_phrase(k.ranks)} skipped {k.skipped} at seq {k.seq}" for k in m.skips)
    elif m.minority:
        note = f"{ranks_phrase(m.minority)} in the minority at seq {m.diverged_seq}"
    elif m.tie:
        note = (f"{' against '.join(str(len(v.ranks)) for v in m.variants[:2])} at seq {m.diverged_seq}: "
                "no majority")
        if m.culprits:
            note += f"; {ranks_phrase(m.culprits)} ran ahead"
    elif m.unpaired:
        note = "a send and its recv differ: either side may be wrong"
    else:
        note = f"{ranks_phrase(m.culprits)} ran ahead" if m.culprits else "no culprit from the seqs"
    return {"comm_id": m.comm_id, "lane": KIND_NAMES.get(m.lane, str(m.lane)), "group": m.group or None,
            "members": fold(m.members), "stuck_seq": m.stuck_seq, "diverged_seq": m.diverged_seq,
            "variants": [{"op": v.op, "ranks": list(v.ranks), "name": v.key[0], "bytes": v.key[1],
                          "dtype": v.key[2], "reduce_op": v.key[3], "peer": v.key[4]} for v in m.variants],
            "minority": list(m.minority), "tie": m.tie,
            "ahead": [{"rank": a.rank, "last_started_seq": a.last_started_seq, "by": a.by} for a in m.ahead],
            "unpaired": list(m.unpaired),
            "skips": [{"ranks": list(k.ranks), "seq": k.seq, "skipped": k.skipped, "evidence": k.evidence}
                      for k in m.skips],
            "culprits": list(m.culprits), "culprit_note": note, "summary": m.summary}


def deadlock_section(findings: Findings) -> dict[str, Any] | None:
    """hang.json's ``deadlock`` (docs/event-dir.md): the waits that close on
    themselves, whether every rank was blocked, and who broke the order."""
    d = findings.deadlock
    if d is None:
        return None
    return {"ranks": d.ranks, "blocked": d.blocked, "culprits": list(d.culprits), "undecided": d.undecided or None,
            "waits": [{"op": w.op.name, "comm_id": w.op.comm_id, "group": group_name(findings, w.op.comm_id),
                       "seq": w.op.seq, "ranks": list(w.ranks), "waits_for": list(w.waits_for)} for w in d.waits],
            "order": [{"rank": r, "ran": {"comm_id": o.actual[0], "group": group_name(findings, o.actual[0]),
                                          "op": o.actual[1]},
                       "expected": {"comm_id": o.expected[0], "group": group_name(findings, o.expected[0]),
                                    "op": o.expected[1]},
                       "ops_per_step": o.period} for r, o in sorted(d.broke.items())]}


def idle_line(stall: IdleStall, idle_timeout_s: float, event_dir: str) -> str:
    """``HANG: idle: ranks 0-3 started or finished no op for 12.3 s (idle timeout 10.0 s), none in
    flight; last op all_reduce on ranks 0-3; stacks in DIR/``"""
    by_op: dict[str, list[int]] = {}
    for rank in stall.ranks:
        by_op.setdefault(stall.last_ops.get(rank) or "none", []).append(rank)
    ordered = sorted(by_op.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    ops = ", ".join(f"{op} on {ranks_phrase(ranks)}" for op, ranks in ordered[:MAX_LAST_OPS_IN_LINE])
    if len(ordered) > MAX_LAST_OPS_IN_LINE:
        ops += f", {len(ordered) - MAX_LAST_OPS_IN_LINE} more in hang.json"
    clauses = [f"HANG: idle: {ranks_phrase(stall.ranks)} started or finished no op for {stall.idle_s:.1f} s "
               f"(idle timeout {idle_timeout_s:.1f} s), none in flight", f"last op {ops}"]
    if stall.exited_ranks:
        clauses.append(f"{ranks_phrase(stall.exited_ranks)} exited")
    if stall.missing_ranks:
        clauses.append(f"{ranks_phrase(stall.missing_ranks)} never reported")
    return f"{'; '.join(clauses)}; stacks in {event_dir.rstrip('/')}/"


def idle_fields(stall: IdleStall, idle_timeout_s: float) -> dict:
    """What hang.json says about an idle stall, beside the per-rank rows."""
    return {"reason": "idle", "timeout_s": idle_timeout_s, "idle_s": round(stall.idle_s, 3),
            "idle_ranks": list(stall.ranks), "exited_ranks": list(stall.exited_ranks),
            "missing_ranks": list(stall.missing_ranks), "culprits": []}


def declaration(findings: Findings, snap: Snapshot, *, job_id: str, event_id: str, event_dir: str,
                declared_unix: float, hang_timeout_s: float, dropped: dict[int, int], refused: str = "",
                stall: IdleStall | None = None, idle_timeout_s: float = 0.0) -> dict[str, Any]:
    """hang.json as the hang is declared, its ``verdict`` the HANG line:
    hung ops in ``findings``, or the idle ``stall``. The culprits' GPUs are
    named in the line and their faults written to faults.json beside it
    (gpus.annotate_hang); a ``refused`` event directory (why, in a phrase)
    is said instead of "stacks in". The per-rank rows are left to
    :func:`complete`: the line needs none of them."""
    doc = hang_document(findings, snap, job_id=job_id, event_id=event_id, event_dir=event_dir,
                        declared_unix=declared_unix, timeout_s=hang_timeout_s, rows=False, dropped=dropped)
    if stall is not None:
        doc.update(idle_fields(stall, idle_timeout_s), verdict=idle_line(stall, idle_timeout_s, event_dir))
    try:
        gpus.annotate_hang(doc, snap, event_dir)
    except Exception:   # the verdict goes out without its GPU clause rather than not at all
        log.exception("collector watchdog: error while naming the culprits' GPUs; continuing")
    if refused:   # not "stacks in" a directory refused and never written (another user's link)
        doc["verdict"] = stacks_not_written(doc["verdict"], refused)
    return doc


def complete(doc: dict[str, Any], findings: Findings, snap: Snapshot) -> None:
    """hang.json's per-rank sections and rows, and their GPUs, into ``doc``."""
    doc.update(rank_sections(findings))
    rows = rank_rows(findings, snap)
    gpus.annotate_rows(rows, snap)
    doc["ranks"] = rows
