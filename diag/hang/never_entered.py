"""The never-entered rule: members of a hung collective's group that have not
started its seq, found by following who waits for whom.

The default group (comm 0) has every live rank as a member; for other
groups a rank is a member if it reports progress on that comm id. A rank
hung in another op that it entered before any member entered this one is no
culprit (it could not have entered); a rank that only waits for another that
never entered is no culprit either: the waits end at a rank in no collective.
Silent ranks are skipped: their seq is stale.
"""

from __future__ import annotations

import dataclasses

from diag.hang.api import (KIND_COLLECTIVE, MAX_GROUPS_EXPLAINED, Case, Findings, HungGroup, NeverEntered,
                           Rule, View)
from diag.hang.progress import comm_lane, in_flight_age


class NeverEnteredRule(Rule):
    name = "never_entered"
    evidence = ("per member of each hung collective's group: the last seq it started, its own in-flight op and "
                "age, the order of the lanes' ops in its earlier steps")
    explains = True

    def judge(self, case: Case) -> Findings:
        found = case.findings
        silent = {r for a in found.silent_agents for r in a.ranks}
        stuck = {(s.comm_id, s.lane): s.seq for s in found.stuck}
        flying = case.aged.flying if case.aged is not None else None
        never = never_entered(case.view, found.hung, silent, stuck, case.members, flying)
        return self.explained(found, f"{len(never)} rank(s) never entered a hung collective" if never else None,
                              never_entered=never)


def never_entered(snap: View, hung: tuple[HungGroup, ...], silent: set[int],
                   stuck: dict[tuple[int, int], int], members: dict | None = None,
                   flying: set[int] | None = None) -> tuple[NeverEntered, ...]:
    """Members of each hung collective's group that have not started its seq.

    The default group (comm 0) has every rank as a member; for other groups a
    rank is a member if it reports progress on that comm id. A rank hung in
    another op can still be one that never entered this one, unless it was
    already in that op before any member entered this one: it could not have
    entered, and it is the others it waits for that the verdict must name.
    (Megatron, a tensor-parallel all-reduce skipped on rank 1: rank 0 waits in
    it; rank 1 ran on into the distributed optimizer's all-reduce, where the
    rest of the job waits for rank 0. Rank 0 is not a culprit there: it was
    stuck first.) Silent ranks are skipped: their seq is stale.
    ``members``: (comm_id, lane) -> {rank: last started seq} of the live
    members, where the divergence pass found them (the same ranks and seqs
    this reads: at 100,000 ranks not read twice). ``flying``: the live
    ranks with an op in flight, where the stalled rule's pass found them.
    """
    out: dict[int, NeverEntered] = {}
    missing: dict[tuple[int, int], set[int]] = {}   # (comm_id, kind) -> the members that never entered it
    entries, now = snap.ranks, snap.now
    new = tuple.__new__   # NeverEntered's own __new__ is a Python function: one per rank at 200,000 ranks
    for group in [g for g in hung if g.op.kind == KIND_COLLECTIVE][:MAX_GROUPS_EXPLAINED]:
        in_group = set(group.ranks)
        comm_id = group.op.comm_id
        # The exact stuck seq (divergence.py) where the members' completions give it.
        seq = max(group.op.seq, stuck.get((comm_id, group.op.kind), 0))
        op = group.op if seq == group.op.seq else dataclasses.replace(group.op, seq=seq)
        known = (members or {}).get((comm_id, KIND_COLLECTIVE))
        behind: list[int] = []
        for rank, started in known.items() if known is not None else live_started(snap, comm_id):
            if started < seq and rank not in in_group and rank not in silent:
                behind.append(rank)
                # A rank with no op in flight cannot have waited first (most of them, at scale).
                if rank not in out and not ((rank in flying if flying is not None
                                             else entries[rank].progress.HasField("oldest_in_flight"))
                                            and _waited_first(entries[rank], now, group)):
                    out[rank] = new(NeverEntered, (rank, op, started))
        if behind:
            missing.setdefault((comm_id, group.op.kind), set()).update(behind)
    if len(out) > 1:
        _follow_waits(hung, out, missing)
    return tuple(map(out.__getitem__, sorted(out)))


def _follow_waits(hung: tuple[HungGroup, ...], out: dict[int, NeverEntered], missing: dict) -> None:
    """A rank that never entered one hung op but waits in another, for a member
    that never entered that one, only waits: following whom each waits for
    ends at a rank in no collective, and that rank is the culprit (``out``
    loses the waiters). torchtitan, rank 3 stalled in its data loader: rank 1
    waits for it in the batch group's token-count all-reduce (step start),
    rank 0 for rank 1 in the tensor-parallel group's reduce-scatter (the
    forward); the ops started milliseconds apart, closer than the ages in
    the reports can tell (``_waited_first``). A wait that comes back to the
    rank is a cycle: the deadlock rule's to judge (deadlock.py), and the
    rank stays."""
    in_op = {}
    for g in hung:
        for r in g.ranks:
            in_op[r] = (g.op.comm_id, g.op.kind)
    # A rank in no hung op waits for no one: its waits end at once, and it
    # stays. (Whether one's waits end does not depend on the others': the
    # smaller side is walked, 200,000 ranks out where the rest never entered.)
    few, many = (in_op, out) if len(in_op) < len(out) else (out, in_op)
    for rank in [r for r in few if r in many]:
        seen, todo = {rank}, [m for m in missing.get(in_op.get(rank), ()) if m != rank]
        while todo:
            waited = todo.pop()
            if waited in seen:
                continue
            seen.add(waited)
            op = in_op.get(waited)
            if op is None:           # in no collective: where the waits end
                del out[rank]
                break
            todo.extend(missing.get(op, ()))


def _waited_first(entry, now: float, group: HungGroup) -> bool:
    """True when the rank has been in flight in another group's op since
    before any member entered ``group``'s: it could not have entered. An
    earlier op of the same group does not count: there the rank is simply
    behind its peers."""
    age = in_flight_age(entry, now)
    if age is None or age <= group.max_age_s:
        return False
    op = entry.progress.oldest_in_flight
    return (op.comm_id, op.kind) != (group.op.comm_id, group.op.kind)


def live_started(snap: View, comm_id: int):
    """(rank, the last seq it started on the collective lane of ``comm_id``)
    of its live members in the world: every live rank is one of the default
    group, at 0 before its first op there."""
    for rank, entry in snap.ranks.items():
        if rank < snap.world_size and entry.progress.alive:
            comm = comm_lane(entry.progress, comm_id, KIND_COLLECTIVE)
            if comm is not None:
                yield rank, comm.last_started_seq
            elif comm_id == 0:
                yield rank, 0
