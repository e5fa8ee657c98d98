"""The idle verdict: its HANG line and hang.json fields. The rule itself
(find_idle) and its once-per-event detector live in diag/hang (idle.py,
detector.py)."""

from __future__ import annotations

from diag.hang.api import IdleStall
from diag.collector.verdict import ranks_phrase

MAX_LAST_OPS_IN_LINE = 3


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
