"""The idle rule: stalls outside any op.

The other rules judge ops in flight. A job whose ranks are all blocked
elsewhere (a file lock, a dead data loader, a deadlock before the first
collective) has no op in flight, so they never fire. This one does: when no
live rank has started or finished any op for its wait (--idle-timeout) and
none has one in flight, the job is idle-hung.

Legitimate long pauses are kept out by the longer default (10 min) and by
named host functions: a checkpoint function named in
XPU_TIMER_HOST_TRACING_FUNC is an op in flight while it runs, so the job is
not idle (the op itself is judged by the stalled rule, as every op is).
"""

from __future__ import annotations

import dataclasses

from diag.hang.api import Case, Finding, Findings, IdleStall, Rule, View


class IdleRule(Rule):
    """Not one of decide.RULES: it judges the whole job, hung op or not, and
    its verdict is an idle stall (:class:`IdleStall` in ``Findings.idle``)."""

    name = "idle"
    evidence = "each live rank's time since it last started or finished an op, and whether one is in flight"
    wait = "idle_timeout_s"

    def judge(self, case: Case) -> Findings:
        silent_nodes = {a.node_rank for a in case.findings.silent_agents}
        stall = find_idle(case.view, self.wait_s(case.limits), silent_nodes)
        if stall is None:
            return case.findings
        return dataclasses.replace(case.findings, idle=stall, fired=case.findings.fired + (
            Finding(self.name, f"{len(stall.ranks)} rank(s) started or finished no op for {stall.idle_s:.1f} s, "
                               f"none in flight"),))


def find_idle(view: View, idle_timeout_s: float, silent_nodes: set[int]) -> IdleStall | None:
    """The stall, or None. Silent agents' ranks may be busy (their data is
    stale), so any silent rank that was alive rules the verdict out."""
    idle, last_ops, exited = [], {}, []
    least = None
    for rank, entry in view.ranks.items():
        p = entry.progress
        if rank >= view.world_size:
            continue
        if not p.alive:
            exited.append(rank)
            continue
        if entry.node_rank in silent_nodes or p.HasField("oldest_in_flight"):
            return None
        idle_s = p.idle_ns * 1e-9 + (view.now - entry.received)
        if idle_s < idle_timeout_s:
            return None
        least = idle_s if least is None else min(least, idle_s)
        idle.append(rank)
        last_ops[rank] = p.last_op
    if not idle:
        return None  # nothing live: the job is done (or not started)
    missing = tuple(r for r in range(view.world_size) if r not in view.ranks)
    return IdleStall(tuple(sorted(idle)), least, last_ops, tuple(sorted(exited)), missing)
