"""The divergence rule: where the members of a hung group stopped agreeing.

Each member reports, per lane of a group, the last seq it started and
completed and, while stuck, the fingerprints of its last ops (op, bytes,
dtype, reduce op, root/peer; docs/agent.md). For each hung collective or p2p
group this module finds:

* the **stuck seq**: one past the highest seq any member completed. An op of
  a group completes on all its members or on none, so a member's completion
  proves it for all; this keeps the seq exact where one member's completion
  is only known per burst (the hook's fence completion).
* the **divergence seq**: the first seq that every member started and whose
  fingerprints differ, with which ranks ran what there. The largest set of
  ranks that agree is the majority; the others are the minority (the
  culprits). Two sets of equal size are a tie, said as such.
* **ahead**: members that started ops past the others (a rank that skipped
  an op runs on into the next ones: NCCL launches asynchronously).
* **skips**: members shown to have skipped ops the others ran at the
  divergence seq, by any of three pieces of evidence, and only where the
  other side shows no such evidence against them:

  - *shift*: from that seq on, their ops are the others' ops k seqs later
    (k = 1 to ``MAX_SKIPPED``): they skipped the k ops the others ran there.
    This holds whichever side launched further: with Megatron's overlapped
    tensor-parallel all-reduces the rank that skipped one is the one behind.
  - *pattern*: the agreed ops just before that seq repeat every P seqs
    (each training step runs the same ones); the others' op there is the one the
    pattern runs, theirs the one it runs k seqs later, and so are their ops
    after it. This holds where neither side could run on (sync ops on gloo).
  - *step*: their op at that seq started in a later optimizer step than the
    others' (CommProgress.recent_steps): they skipped the rest of the others' step.

  A tie (1 against 1 in a 2-rank tensor-parallel group) is then no longer
  undecided.

Cost: O(members x compared seqs) dictionary work once per hung group, only
on a hang; 16,384 ranks take well under a second (bench/divergence_scale.py).
"""

from __future__ import annotations

import dataclasses

from diag.common.ranks import fold
from diag.common.units import format_size
from diag.hang.api import (MAX_GROUPS_EXPLAINED, Ahead, Case, Findings, GroupLabel, HungGroup, Mismatch,
                           Rule, Skip, StuckAt, Variant, View)
from diag.hang.p2p import unpaired as _unpaired
from diag.records.format import DTYPE_NAMES, KIND_COLLECTIVE, REDOP_NAMES, torch_name

MAX_VARIANTS_SHOWN = 3
MAX_SKIPPED = 4        # ops one side may have skipped, for the shift evidence
_ROOTED = ("broadcast", "reduce", "gather", "scatter")


class DivergedRule(Rule):
    """The ``diverged`` verdict: the divergence rule's mismatch in a stuck
    group, with culprits. Those ops can never complete."""

    name = "diverged"
    evidence = "the divergence rule's mismatch in a stuck group, with its culprits"
    wait = "proof_s"
    decides = True

    def judge(self, case: Case) -> Findings:
        for m in case.findings.mismatches:
            if m.diverged_seq is not None and m.culprits:   # a tie with no evidence names no one: no proof
                ranks = ", ".join(map(str, m.culprits[:4])) + (" ..." if len(m.culprits) > 4 else "")
                return self.decided(case.findings, f"group {m.group or m.comm_id} diverged at seq "
                                                   f"{m.diverged_seq} (rank {ranks}): those ops can never complete")
        return case.findings


class DivergenceRule(Rule):
    """Explains a hang: for each hung collective or p2p group, the stuck seq,
    where the members' fingerprints first differ, who ran ahead and who
    skipped what, and p2p sends whose peer's recv does not pair (p2p.py)."""

    name = "divergence"
    evidence = ("per member of each hung op's group: last started and completed seq, the fingerprints of its "
                "last ops, the optimizer step each started in")
    explains = True

    def judge(self, case: Case) -> Findings:
        mismatches, labels, stuck = analyse_groups(case.view, case.findings.hung, MAX_GROUPS_EXPLAINED,
                                                   case.members)
        return self.explained(case.findings, "; ".join(m.summary for m in mismatches) if mismatches else None,
                              mismatches=mismatches, groups=labels, stuck=stuck)


def analyse_groups(snap: View, hung: tuple[HungGroup, ...], limit: int = 8, members_out: dict | None = None
                   ) -> tuple[tuple[Mismatch, ...], tuple[GroupLabel, ...], tuple[StuckAt, ...]]:
    """Mismatch findings, labels and stuck seqs for the hung comm ops' groups
    (at most ``limit`` groups, largest first, as the rules explain them).
    ``members_out``: filled with (comm_id, lane) -> {rank: the last seq it
    started} of the live members, by rank, for the rules to reuse (0 for a
    member of the default group that has not used it yet)."""
    mismatches, labels, stuck, seen = [], [], [], set()
    for group in hung:
        op = group.op
        if not op.is_comm_op or (op.comm_id, op.kind) in seen or len(seen) >= limit:
            continue
        seen.add((op.comm_id, op.kind))
        known = next((g for g in labels if g.comm_id == op.comm_id), None)
        scanned, members = _scan(snap, op.comm_id, op.kind, known is None,   # one pass over the ranks
                                 _spans_world(snap, group))
        label = known or scanned
        if label is not None and label not in labels:
            labels.append(label)
        if not members:
            if members_out is not None:
                members_out[(op.comm_id, op.kind)] = {}
            continue
        name = label.name if label is not None else ""
        found, at, started, windowed = _compare(members, op.comm_id, op.kind, name, op.seq)
        if members_out is not None:
            members_out[(op.comm_id, op.kind)] = started
        at_name = _name_at(windowed, at) or op.name
        # Each hung op of this lane whose ranks all started the stuck seq is
        # that op (its own seq is a burst's first); the others are their own.
        for other in hung:
            if ((other.op.comm_id, other.op.kind) == (op.comm_id, op.kind)
                    and all(started.get(r, 0) >= at for r in other.ranks)):
                stuck.append(StuckAt(op.comm_id, op.kind, at, at_name, other.op.seq))
        if found is not None:
            mismatches.append(found)
    return tuple(mismatches), tuple(labels), tuple(stuck)


def _name_at(windowed, seq: int) -> str | None:
    """The op name a member's fingerprints give for ``seq``, if any
    (``windowed``: the members that sent fingerprints)."""
    for _, comm in windowed:
        i = seq - comm.recent.first_seq
        if 0 <= i < len(comm.recent.ops):
            return comm.recent.ops[i].name
    return None


def _spans_world(snap: View, group: HungGroup) -> bool:
    """Whether the hung op's group has as many members as the world: then
    every rank is one, even one that never used it (a rank that skipped the
    group's first op has no lane of it to report)."""
    entry = snap.ranks.get(group.ranks[0])
    return entry is not None and entry.progress.oldest_in_flight.comm_size == snap.world_size


def _scan(snap: View, comm_id: int, lane: int, want_label: bool, whole: bool = False
          ) -> tuple[GroupLabel | None, list]:
    """One pass over the ranks (at 100,000 ranks each pass reads seconds' worth
    of comms): the group as users know it, when ``want_label``, whichever lane
    hung (its name from any member's report of either lane, its members the
    live ranks that report either lane of it, every live rank for the default
    group), so a p2p op names its group exactly as a collective does; and
    (rank, CommProgress or None) of the live members of this lane (every rank
    belongs to the default group, even one that has not used it yet, as to
    any group ``whole``: as large as the world)."""
    ranks, name, out = [], "", []
    default = comm_id == 0
    world = snap.world_size
    every = (default or whole) and lane == KIND_COLLECTIVE   # every live rank is a member, with its lane or without
    looking = want_label   # for a name: until one is found
    for rank, entry in snap.ranks.items():
        if rank >= world:
            continue
        p = entry.progress
        if not p.alive:
            continue
        found, any_lane = None, False
        for comm in p.comms:
            if comm.comm_id == comm_id:
                any_lane = True
                if looking:
                    name = comm.group_name
                    looking = not name
                if found is None and comm.lane == lane:
                    found = comm
                    if not looking:
                        break
        if want_label and (any_lane or default or whole):
            ranks.append(rank)
        if found is not None or every:
            out.append((rank, found))
    out.sort(key=lambda m: m[0])
    label = (GroupLabel(comm_id, name or ("default" if default else ""), fold(sorted(ranks)))
             if want_label and ranks else None)
    return label, out


def _compare(members, comm_id: int, lane: int, name: str, hung_seq: int
             ) -> tuple[Mismatch | None, int, dict, list]:
    """(the mismatch or None, the stuck seq, rank -> last started seq, the
    members that sent fingerprints)."""
    # One pass over the members' comms (each field read costs at 100,000
    # ranks); only the members with fingerprints are read again.
    started, sizes, completed, windowed = {}, set(), 0, []
    for member in members:
        r, c = member
        if c is None:
            started[r] = 0
            continue
        started[r] = c.last_started_seq
        sizes.add(c.comm_size)
        done = c.last_completed_seq
        if done > completed:
            completed = done
        if c.HasField("recent"):
            windowed.append(member)
    ranks = tuple(started)
    stuck = hung_seq
    if lane != KIND_COLLECTIVE:
        # p2p ops pair, a send with its peer's recv; the members' seqs count
        # different ops (a first stage sends what the next receives), so they
        # are neither compared nor said to run ahead.
        unpaired = _unpaired(windowed, sizes, len(members))
        if not unpaired:
            return None, stuck, started, windowed
        found = Mismatch(comm_id, lane, name, ranks, stuck, unpaired=unpaired)
        return _with_summary(found), stuck, started, windowed
    diverged, variants = _first_difference(windowed, min(started.values()))
    # "An op completes on all members or on none" holds for a group whose
    # members agree: not past a divergence (a mismatched op may complete on
    # one side only), nor for members whose count is not the group's size.
    if diverged is None and sizes == {len(members)}:
        stuck = max(hung_seq, completed + 1)
    entered = [s for s in started.values() if s >= stuck]
    ahead: tuple[Ahead, ...] = ()
    if len(entered) == len(started):   # nobody is behind: who ran on past the others?
        low = min(entered)
        ahead = tuple(Ahead(r, s, s - low) for r, s in sorted(started.items()) if s > low)
    if diverged is None and not ahead:
        return None, stuck, started, windowed
    minority, tie = _minority(variants)
    skips = _skips(windowed, diverged, variants)
    found = Mismatch(comm_id, lane, name, ranks, stuck, diverged, variants, minority, tie, ahead, skips=skips)
    return _with_summary(found), stuck, started, windowed


def _first_difference(windowed, upto: int) -> tuple[int | None, tuple[Variant, ...]]:
    """The first seq <= ``upto`` (every member started it) at which the
    fingerprints of the members that sent them (``windowed``) differ, and
    the variants there.

    Members whose windows serialize alike have the same history: they are
    compared once, as a class. After a hang nearly all members of a group
    stopped at the same seq, so there are a few classes, not thousands."""
    classes: dict[bytes, list] = {}
    for rank, comm in windowed:
        window = comm.recent
        entry = classes.get(key := window.SerializeToString())
        if entry is None:
            classes[key] = [window.first_seq, list(window.ops), [rank]]
        else:
            entry[2].append(rank)
    if len(classes) < 2:
        return None, ()
    low = max(first for first, _, _ in classes.values())
    for seq in range(low, upto + 1):
        keys: dict[bytes, list] = {}
        for first, ops, ranks in classes.values():
            i = seq - first
            if i < len(ops):
                fp = ops[i]
                found = keys.setdefault(fp.SerializeToString(), [fp, []])
                found[1].extend(ranks)
        if len(keys) > 1 and len({_key(fp) for fp, _ in keys.values()}) > 1:
            return seq, _variants(keys.values())
    return None, ()


def _skips(windowed, seq: int | None, variants: tuple[Variant, ...]) -> tuple[Skip, ...]:
    """The variants at ``seq`` shown to have skipped ops the others ran (see
    the module docstring), each against the variant it is compared with. A
    variant is said to have skipped only where that variant shows no
    evidence against it, and never all of them."""
    if seq is None or len(variants) < 2:
        return ()
    comms = {rank: comm for rank, comm in windowed}
    # Each variant by the member that saw furthest: its window has the most ops after seq.
    reps = [max(v.ranks, key=lambda r: _last(comms[r].recent)) for v in variants]
    period = _period(comms[reps[0]].recent, seq)
    found = []
    for i, v in enumerate(variants):
        for j, w in enumerate(variants):
            if i == j:
                continue
            evidence = _skip_evidence(comms[reps[i]], comms[reps[j]], seq, w, v, period)
            if evidence is not None and _skip_evidence(comms[reps[j]], comms[reps[i]], seq, v, w,
                                                       period) is None:
                found.append(Skip(v.ranks, seq, evidence[0], evidence[1]))
                break
    if len(found) == len(variants):
        return ()       # each side's evidence against the other: no call
    return tuple(found)


def _period(window, seq: int) -> int:
    """The smallest P with which the agreed ops just before ``seq`` repeat:
    their last P equal the P before those (a training step's ops on this
    lane; the first steps, with their set-up ops, may differ); 0 if none."""
    ops = [_key(fp) for fp in window.ops[:max(0, seq - window.first_seq)]]
    n = len(ops)
    for p in range(1, n // 2 + 1):
        if ops[n - p:] == ops[n - 2 * p:n - p]:
            return p
    return 0


def _skip_evidence(my_comm, their_comm, seq: int, them: Variant, me: Variant,
                   period: int) -> tuple[str, str] | None:
    """(what I skipped, how it shows), if my window shows I skipped ops that
    theirs ran at ``seq``; None otherwise."""
    mine, theirs = my_comm.recent, their_comm.recent
    for k in range(1, MAX_SKIPPED + 1):
        compared, same = 0, True
        s = seq
        while True:
            a, b = _op(mine, s), _op(theirs, s + k)
            if a is None or b is None:
                break
            compared += 1
            if _key(a) != _key(b):
                same = False
                break
            s += 1
        if compared and same and all(_op(theirs, seq + i) is not None for i in range(k)):
            ran = [describe(*_key(_op(theirs, seq + i))) for i in range(k)]
            what = ran[0] if k == 1 else f"{k} ops from {ran[0]}"
            return what, (f"its ops from seq {seq} are {_ranks(them.ranks)}'s {k} seq"
                          f"{'s' if k > 1 else ''} later")
    a, b = _op(mine, seq), _op(theirs, seq)
    if period and a is not None and b is not None:
        # The ops repeat every `period` seqs (each step runs the same ones).
        # Theirs at seq is what the pattern runs there; mine is what it runs
        # k seqs later, and so is each of my ops after it.
        expected = [_op(theirs, seq - period + i) for i in range(period)]
        if None not in expected and _key(b) == _key(expected[0]) and _key(a) != _key(expected[0]):
            for k in range(1, min(MAX_SKIPPED, period - 1) + 1):
                mine_after = [_op(mine, seq + i) for i in range(_last(mine) - seq)]
                if all(_key(fp) == _key(expected[(k + i) % period]) for i, fp in enumerate(mine_after)):
                    ran = describe(*_key(expected[0]))
                    what = ran if k == 1 else f"{k} ops from {ran}"
                    return what, (f"its op at seq {seq} is the one each step runs {k} seq{'s' if k > 1 else ''} "
                                  f"later; the ops repeat every {period}")
    my_step, their_step = _step(my_comm, seq), _step(their_comm, seq)
    if my_step is not None and their_step is not None and my_step > their_step:
        return (f"the rest of step {their_step + 1} from {them.op}",
                f"its op at seq {seq} started in step {my_step + 1}, {_ranks(them.ranks)}'s in step {their_step + 1}")
    return None


def _step(comm, seq: int) -> int | None:
    """The optimizer steps the member had finished when its op at ``seq``
    started (CommProgress.recent_steps), if it said."""
    i = seq - comm.recent.first_seq
    steps = comm.recent_steps.step
    return steps[i] if 0 <= i < len(steps) else None


def _op(window, seq: int):
    i = seq - window.first_seq
    return window.ops[i] if 0 <= i < len(window.ops) else None


def _last(window) -> int:
    return window.first_seq + len(window.ops)


def _key(fp) -> tuple:
    return torch_name(fp.name), fp.bytes, fp.dtype, fp.reduce_op, fp.peer


def _variants(found) -> tuple[Variant, ...]:
    merged: dict[tuple, list[int]] = {}
    for fp, ranks in found:
        merged.setdefault(_key(fp), []).extend(ranks)
    variants = [Variant(k, describe(*k), tuple(sorted(r))) for k, r in merged.items()]
    variants.sort(key=lambda v: v.ranks[0])
    return tuple(variants)


def _minority(variants: tuple[Variant, ...]) -> tuple[tuple[int, ...], bool]:
    if not variants:
        return (), False
    sizes = sorted((len(v.ranks) for v in variants), reverse=True)
    if sizes[0] == sizes[1]:
        return (), True
    largest = max(variants, key=lambda v: len(v.ranks))
    return tuple(sorted(r for v in variants if v is not largest for r in v.ranks)), False


def describe(name: str, nbytes: int, dtype: int, reduce_op: int, peer: int) -> str:
    """``all_reduce 4 B (float32, sum)``, ``broadcast 1 MiB (bfloat16, root 0)``."""
    details = []
    if 0 <= dtype < len(DTYPE_NAMES):
        details.append(DTYPE_NAMES[dtype])
    if 0 <= reduce_op < len(REDOP_NAMES):
        details.append(REDOP_NAMES[reduce_op])
    if peer >= 0:
        details.append(f"{'root' if name in _ROOTED else 'peer'} {peer}")
    text = f"{name} {format_size(nbytes)}"
    return f"{text} ({', '.join(details)})" if details else text


def _ranks(ranks) -> str:
    ranks = list(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {fold(ranks)}"


def _with_summary(m: Mismatch) -> Mismatch:
    """The one-line clause for the HANG line (also hang.json's mismatch.summary)."""
    parts = []
    if m.diverged_seq is not None:
        shown = m.variants[:MAX_VARIANTS_SHOWN]
        said = ", ".join(f"{_ranks(v.ranks)} {v.op}" for v in shown)
        if len(m.variants) > len(shown):
            said += f", {len(m.variants) - len(shown)} more variants in hang.json"
        text = f"the ranks diverged at seq {m.diverged_seq}: {said}"
        if m.skips:
            text += ": " + ", ".join(f"{_ranks(k.ranks)} skipped {k.skipped} ({k.evidence})" for k in m.skips)
        elif m.tie:
            sizes = "-".join(str(len(v.ranks)) for v in m.variants[:2])
            text += f" ({sizes.replace('-', ' against ')}: the seqs alone cannot tell which side is wrong)"
        parts.append(text)
    if m.unpaired:
        parts.append("the p2p ops do not pair: " + "; ".join(m.unpaired))
    if m.ahead and not m.skips:   # a skip says who ran on and why
        by = {}
        for a in m.ahead:
            by.setdefault((a.by, a.last_started_seq), []).append(a.rank)
        parts.extend(f"{_ranks(r)} ran {n} op{'s' if n != 1 else ''} ahead (at seq {s})"
                     for (n, s), r in sorted(by.items(), key=lambda kv: kv[1][0]))
    return dataclasses.replace(m, summary="; ".join(parts))


def compare_members(members, comm_id: int, lane: int, name: str, seq: int) -> Mismatch | None:
    """This rule's comparison over members chosen by the caller: ``members``
    is [(rank, CommProgress or None)], exited ranks included (the FAILED
    verdict, diag/failure, compares the ranks of a job that crashed); ``seq``
    the group's highest seq started. The Mismatch, or None where the members
    agree and none ran ahead."""
    return _compare(sorted(members, key=lambda m: m[0]), comm_id, lane, name, seq)[0]
