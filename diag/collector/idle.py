"""Stalls outside any op: the idle rule, its once-per-event detector and its line.

The hang rules judge ops in flight. A job whose ranks are all blocked
elsewhere (a file lock, a dead data loader, a deadlock before the first
collective) has no op in flight, so they never fire. This rule does: when no
live rank has started or finished any op for ``--idle-timeout`` and none has
one in flight, the job is idle-hung. It is declared like a hang (event
directory, stacks, hang.json with ``reason: "idle"``).

Legitimate long pauses are kept out by the longer default (10 min) and by
named host functions: a checkpoint function named in
XPU_TIMER_HOST_TRACING_FUNC is an op in flight while it runs, so the job is
not idle (the op itself is judged by --hang-timeout, as every op is).

Pure functions of a Snapshot, as rules.py; the time is the snapshot's.
"""

from __future__ import annotations

from diag.collector.api import IdleStall
from diag.collector.state import Snapshot
from diag.collector.verdict import ranks_phrase

# A rank's last activity, estimated at each report, moves by the report's
# transit time; more than this means it did something.
ACTIVITY_SLACK_S = 1.0
MAX_LAST_OPS_IN_LINE = 3


def find_idle(snap: Snapshot, idle_timeout_s: float, silent_nodes: set[int]) -> IdleStall | None:
    """The stall, or None. Silent agents' ranks may be busy (their data is
    stale), so any silent rank that was alive rules the verdict out."""
    idle, last_ops, exited = [], {}, []
    least = None
    for rank, entry in snap.ranks.items():
        p = entry.progress
        if rank >= snap.world_size:
            continue
        if not p.alive:
            exited.append(rank)
            continue
        if entry.node_rank in silent_nodes or p.HasField("oldest_in_flight"):
            return None
        idle_s = p.idle_ns * 1e-9 + (snap.now - entry.received)
        if idle_s < idle_timeout_s:
            return None
        least = idle_s if least is None else min(least, idle_s)
        idle.append(rank)
        last_ops[rank] = p.last_op
    if not idle:
        return None  # nothing live: the job is done (or not started)
    missing = tuple(r for r in range(snap.world_size) if r not in snap.ranks)
    return IdleStall(tuple(sorted(idle)), least, last_ops, tuple(sorted(exited)), missing)


def last_activity(entry) -> float:
    """When the rank last started or finished an op, on the collector's clock."""
    return entry.received - entry.progress.idle_ns * 1e-9


class IdleDetector:
    """Fires once per idle stall; re-arms as soon as any rank of it is active
    again (an op started or finished, or a new pid: torchrun restarted it)."""

    def __init__(self) -> None:
        self._event: dict[int, tuple[int, float]] | None = None   # rank -> (pid, last activity)

    @property
    def armed(self) -> bool:
        return self._event is None

    def update(self, stall: IdleStall | None, snap: Snapshot) -> bool:
        """True when ``stall`` is a new event to declare."""
        if self._event is not None and self._over(snap):
            self._event = None
        if self._event is not None or stall is None:
            return False
        self._event = {r: (snap.ranks[r].progress.pid, last_activity(snap.ranks[r])) for r in stall.ranks}
        return True

    def _over(self, snap: Snapshot) -> bool:
        for rank, (pid, active_at) in self._event.items():
            entry = snap.ranks.get(rank)
            if entry is None:
                continue
            p = entry.progress
            if (p.pid != pid or p.HasField("oldest_in_flight")
                    or (p.alive and last_activity(entry) > active_at + ACTIVITY_SLACK_S)):
                return True
        return False


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
