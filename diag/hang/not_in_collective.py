"""The not-in-collective rule: while some ranks hang, the others are
explained. Ranks with no op in flight are "not in any collective", ranks
that exited "exited", members behind a hung op's seq "never entered" it
(never_entered.py), silent agents' ranks "silent", and ranks that never
reported are listed as missing. These are the culprits the HANG line names
after the hung ops.
"""

from __future__ import annotations

import operator

from diag.hang.api import Case, Findings, NeverEntered, OpKey, Rule, SilentAgent, Suspect, View
from diag.hang.progress import behind

NOT_IN_ANY = "not in any collective"
EXITED = "exited"


class NotInCollectiveRule(Rule):
    name = "not_in_collective"
    evidence = "each rank not hung: whether it is alive, has an op in flight, its last op and idle time"
    explains = True

    def judge(self, case: Case) -> Findings:
        found, view = case.findings, case.view
        hung_ranks = {r for g in found.hung for r in g.ranks}
        silent_ranks = {r for a in found.silent_agents for r in a.ranks}
        missing = tuple(r for r in range(view.world_size) if r not in view.ranks)
        names = {g.comm_id: g.short() for g in found.groups}
        suspects = _suspects(view, hung_ranks | silent_ranks, found.never_entered, found.silent_agents, names,
                             case.aged)
        # Counted, not sorted by reason: 100,000 of them before the HANG line at scale.
        return self.explained(found, f"{len(suspects)} rank(s) not waiting with the others" if suspects else None,
                              suspects=suspects, missing_ranks=missing)


def _suspects(snap: View, skip: set[int], never: tuple[NeverEntered, ...],
              silent: tuple[SilentAgent, ...], names: dict[int, str], aged=None) -> tuple[Suspect, ...]:
    # Before the HANG line, and one per rank where the rest of a 100,000-rank
    # job never entered the op: sorted once at the end, each reason made once.
    # ``aged``: the stalled rule's pass on this view (stalled.Aged), which
    # read who is alive and in flight already.
    out = []
    now, world = snap.now, snap.world_size
    new = tuple.__new__   # Suspect's own __new__ is a Python function
    if aged is not None:
        flying, dead = aged.flying, aged.dead
        for rank, entry in snap.ranks.items():
            if rank in skip or rank >= world or rank in flying:
                continue
            p = entry.progress
            out.append(new(Suspect, (rank, EXITED if rank in dead else NOT_IN_ANY, p.last_op or None,
                                     p.idle_ns * 1e-9 + (now - entry.received))))
    else:
        for rank, entry in snap.ranks.items():
            if rank in skip or rank >= world:
                continue
            p = entry.progress
            if p.alive:
                if p.HasField("oldest_in_flight"):
                    continue
                reason = NOT_IN_ANY
            else:
                reason = EXITED
            out.append(new(Suspect, (rank, reason, p.last_op or None, p.idle_ns * 1e-9 + (now - entry.received))))
    idle = set(map(_RANK, out))
    reasons: dict[OpKey, str] = {}
    for n in [n for n in never if n[0] not in idle]:   # NeverEntered: rank first
            reason = reasons.get(n.op)
            if reason is None:
                group = names.get(n.op.comm_id, n.op.comm_id)
                reason = reasons[n.op] = f"never entered {n.op.name} (group {group}, seq {n.op.seq})"
            out.append(Suspect(n.rank, reason, snap.ranks[n.rank].progress.last_op or None))
    for agent in silent:
        for rank in agent.ranks:
            out.append(Suspect(rank, f"agent on node {agent.node_rank} silent for {agent.silent_for_s:.1f} s"))
    out.sort(key=_RANK)
    return tuple(out)


_RANK = operator.itemgetter(0)


class ExitedRule(Rule):
    """The ``exited`` verdict: a member of a stuck group exited and never
    started the op the others wait in."""

    name = "exited"
    evidence = "a member of a stuck group that exited before the op the others wait in"
    wait = "proof_s"
    decides = True

    def judge(self, case: Case) -> Findings:
        found, view = case.findings, case.view
        hung_comms = {g.op.comm_id for g in found.hung if g.op.is_comm_op}
        for s in found.suspects:
            entry = view.ranks.get(s.rank) if s.reason == EXITED else None
            if entry is None:
                continue
            for c in entry.progress.comms:
                if c.comm_id in hung_comms and behind(found, c):
                    return self.decided(found, f"rank {s.rank} exited before the op its group waits in")
        return found
