"""The deadlock rule: ranks blocked in collectives that wait for each other.

A rank in a collective waits for the members of its group that have not
started that seq. Where every rank so waited for is itself blocked in a
collective of another group, which waits in turn only for such ranks, the
waits close on themselves: no amount of time ends them (rank 1 skipped the
world all-reduce and waits in the ``stats`` one for ranks 0 and 2, who wait
in the world one for rank 1). That is proof, not a guess from the clock.

Blocked means the rank started and finished nothing (no op, no kernel
launch) since it entered its op and its process tree is quiet (no CPU, I/O
or launch: ``RankActivity.quiet_ns``). A rank that issued an async op and
computes is busy, not blocked: its waits may still end. (A GPU rank whose
host spins in a sync on the stuck stream uses CPU too, and is not proven
blocked this way: the timeout judges it.)

Who broke it: each member's own earlier steps give the order its groups'
ops run in (order.py); the rank whose current op is not the one its steps
run at this point skipped or added one. Where no history shows an order, or
every member broke it, the evidence cannot tell and no one is named: the
waiting ranks are never blamed.
"""

from __future__ import annotations

import dataclasses

from diag.common.ranks import fold
from diag.hang import order
from diag.hang.api import (KIND_COLLECTIVE, MAX_GROUPS_EXPLAINED, Case, Deadlock, DeadlockWait, Findings,
                           NeverEntered, Rule, View)
from diag.hang.never_entered import live_started
from diag.hang.progress import comm_lane


class DeadlockRule(Rule):
    name = "deadlock"
    evidence = ("per rank in a hung collective: the members of its group that have not started its seq, whether "
                "each of them is blocked in another group's collective, and the order of its groups' ops in its "
                "earlier steps")
    explains = True
    wait = "proof_s"   # each rank of the cycle blocked this long: the waits are settled

    def judge(self, case: Case) -> Findings:
        found = case.findings
        waits = _waits(case)
        if not waits:
            return found
        dead = _closed(waits)
        if not dead:
            return found
        view = case.view
        ranks = sorted({r for w in dead for r in w.ranks})
        blocked = all(_blocked(view, r, self.wait_s(case.limits)) for r in ranks)
        verdicts = _orders(view, dead)
        breakers = sorted(r for r, o in verdicts.items() if o.verdict == order.BROKE)
        culprits = breakers if 0 < len(breakers) < len(ranks) else []
        deadlock = Deadlock(waits=tuple(dead), blocked=blocked, culprits=tuple(culprits),
                            broke={r: verdicts[r] for r in culprits},
                            undecided="" if culprits else _why_undecided(verdicts, breakers))
        never = _never_entered(view, found.never_entered, dead, set(ranks), set(culprits))
        what = (f"{len(ranks)} rank(s) wait for each other"
                + (f"; {len(culprits)} broke the order of their steps" if culprits else ""))
        return self.explained(found, what, deadlock=deadlock, never_entered=never)


class DeadlockedRule(Rule):
    """The ``deadlock`` verdict: the deadlock rule's cycle, every rank of it blocked."""

    name = "deadlock"
    evidence = ("every rank of a set blocked in a collective whose missing members are blocked in another "
                "collective of the set (the deadlock rule, diag/hang/deadlock.py)")
    wait = "proof_s"
    decides = True

    def judge(self, case: Case) -> Findings:
        dead = case.findings.deadlock
        if dead is None or not dead.blocked:
            return case.findings
        ranks = dead.ranks
        who = f"ranks {fold(ranks)}" if len(ranks) > 1 else f"rank {ranks[0]}"
        return self.decided(case.findings, f"{who} each blocked in a collective that waits for ranks blocked in "
                                           f"another: a cycle no wait can end")


def _waits(case: Case) -> list[DeadlockWait]:
    """One per hung collective (the largest few): its ranks and the live
    members of its group that have not started its seq."""
    found, view = case.findings, case.view
    silent = {r for a in found.silent_agents for r in a.ranks}
    stuck = {(s.comm_id, s.lane): s.seq for s in found.stuck}
    out = []
    for group in [g for g in found.hung if g.op.kind == KIND_COLLECTIVE][:MAX_GROUPS_EXPLAINED]:
        comm_id = group.op.comm_id
        seq = max(group.op.seq, stuck.get((comm_id, KIND_COLLECTIVE), 0))
        in_group = set(group.ranks)
        known = case.members.get((comm_id, KIND_COLLECTIVE))
        started = known.items() if known is not None else live_started(view, comm_id)
        missing = tuple(sorted(r for r, s in started if s < seq and r not in in_group))
        if any(r in silent for r in missing):
            continue    # a silent member's seq is stale: nothing is proven of it
        op = group.op if seq == group.op.seq else dataclasses.replace(group.op, seq=seq)
        out.append(DeadlockWait(op, group.ranks, missing))
    return out


# Reading one rank's order costs about a millisecond (its windows merged and
# sorted): a cycle of 100,000 ranks would hold the HANG line for minutes. A
# wait of more ranks than this is read through a spread sample; only where
# the sample does not agree that every rank kept the order is every rank read.
SAMPLED_PER_WAIT = 32


def _orders(view: View, dead: list[DeadlockWait]) -> dict[int, order.Order]:
    """rank -> what its earlier steps say of its op, for every rank of ``dead``."""
    cache: dict = {}
    out: dict[int, order.Order] = {}
    for w in dead:
        ranks = w.ranks
        if len(ranks) > SAMPLED_PER_WAIT:
            stride = len(ranks) / SAMPLED_PER_WAIT
            sample = {ranks[int(i * stride)] for i in range(SAMPLED_PER_WAIT)}
            seen = {r: order.judge(view.ranks[r].progress, w.op.comm_id, w.op.seq, cache) for r in sample}
            if all(o.verdict == order.KEPT for o in seen.values()):
                kept = next(iter(seen.values()))
                out.update(dict.fromkeys(ranks, kept))
                continue
        for r in ranks:
            out[r] = order.judge(view.ranks[r].progress, w.op.comm_id, w.op.seq, cache)
    return out


def _closed(waits: list[DeadlockWait]) -> list[DeadlockWait]:
    """The waits whose missing members all wait in such waits themselves:
    the largest set closed under "waits for". Empty missing sets are not
    deadlocks (every member is there; the op is stuck for another reason)."""
    alive = [w for w in waits if w.waits_for]
    while True:
        inside = {r for w in alive for r in w.ranks}
        kept = [w for w in alive if all(r in inside for r in w.waits_for)]
        if len(kept) == len(alive):
            return kept
        alive = kept


def _blocked(view: View, rank: int, wait_s: float) -> bool:
    entry = view.ranks.get(rank)
    if entry is None:
        return False
    p = entry.progress
    since = view.now - entry.received
    if not p.alive or p.idle_ns * 1e-9 + since < wait_s or not p.HasField("activity"):
        return False
    return p.activity.quiet_ns * 1e-9 + since >= wait_s


def _never_entered(view: View, never: tuple[NeverEntered, ...], dead: list[DeadlockWait], ranks: set[int],
                   culprits: set[int]) -> tuple[NeverEntered, ...]:
    """The never-entered list with the deadlock's waiting ranks out and its
    culprits in, each against the first op that waits for it."""
    out = {n.rank: n for n in never if n.rank not in ranks or n.rank in culprits}
    for w in dead:
        for r in w.waits_for:
            if r in culprits and r not in out:
                comm = comm_lane(view.ranks[r].progress, w.op.comm_id, KIND_COLLECTIVE)
                out[r] = NeverEntered(r, w.op, comm.last_started_seq if comm is not None else 0)
    return tuple(out[r] for r in sorted(out))


def _why_undecided(verdicts: dict, breakers: list[int]) -> str:
    if breakers:
        return "every rank of it broke the order of its earlier steps: no one is named"
    if all(o.verdict == order.KEPT for o in verdicts.values()):
        return "each rank's op is the one its earlier steps run here: no one is named"
    return "no earlier steps show the order of their groups' ops: no one is named"
