"""Hang rules: pure functions of a :class:`~diag.collector.state.Snapshot`.

No clock, no I/O: time is the snapshot's ``now``, so unit tests drive every
rule with a fake clock.

* A rank whose oldest in-flight op is older than the timeout is hung (its age
  is ``age_ns`` at report time plus the time since the report arrived). If any
  rank is hung, the job is hung.
* An agent with no report for longer than ``silent_after`` is silent; its
  ranks' data is stale, so they are reported as silent, not judged hung.
  Ranks reported ``alive = false`` have exited: never hung, and an agent
  whose ranks all exited may go quiet (the job or node is done).
* While some ranks hang, the others are explained: ranks with no op in flight
  ("not in any collective"), members of a hung collective's group whose seq is
  behind it ("never entered"), exited ranks, silent ranks and ranks that never
  reported.
"""

from __future__ import annotations

import dataclasses
import operator

from diag.collector.api import (KIND_COLLECTIVE, Findings, HungGroup, NeverEntered, OpKey, SilentAgent,
                                Suspect)
from diag.collector import divergence
from diag.collector.state import Snapshot

# Never-entered analysis is O(world) per hung collective; a pathological job
# with thousands of distinct hung ops is explained by its largest groups only.
MAX_GROUPS_EXPLAINED = 8
NOT_IN_ANY = "not in any collective"
EXITED = "exited"


def analyse(snap: Snapshot, timeout_s: float, silent_after_s: float, explain: bool = True) -> Findings:
    """Apply every rule to ``snap``. Cheap when nothing hangs: one pass.
    ``explain=False`` skips the divergence analysis (its fingerprint
    comparison costs ~0.7 s at 16,384 ranks): for ticks during a hang already
    declared, which need only to see whether it is still stuck."""
    silent = _silent_agents(snap, silent_after_s)
    silent_nodes = {a.node_rank for a in silent}
    hung = _hung_groups(snap, timeout_s, silent_nodes)
    if not hung:
        return Findings(world_size=snap.world_size, silent_agents=silent)
    hung_ranks = {r for g in hung for r in g.ranks}
    silent_ranks = {r for a in silent for r in a.ranks}
    missing = tuple(r for r in range(snap.world_size) if r not in snap.ranks)
    members: dict = {}   # (comm_id, lane) -> live members, from the divergence pass: not read twice
    mismatches, labels, stuck = (divergence.analyse_groups(snap, hung, MAX_GROUPS_EXPLAINED, members) if explain
                                 else ((), (), ()))
    never = _never_entered(snap, hung, silent_ranks, {(s.comm_id, s.lane): s.seq for s in stuck}, members)
    names = {g.comm_id: g.short() for g in labels}
    suspects = _suspects(snap, hung_ranks | silent_ranks, never, silent, names)
    return Findings(world_size=snap.world_size, hung=hung, suspects=suspects, never_entered=never,
                    silent_agents=silent, missing_ranks=missing, mismatches=mismatches, groups=labels,
                    stuck=stuck)


def in_flight_age(entry, now: float) -> float | None:
    """Seconds the rank's oldest op has been in flight at ``now``, or None."""
    progress = entry.progress
    if not progress.HasField("oldest_in_flight"):
        return None
    return progress.oldest_in_flight.age_ns * 1e-9 + (now - entry.received)


def _silent_agents(snap: Snapshot, silent_after_s: float) -> tuple[SilentAgent, ...]:
    # The quiet ones first, then sorted: sorting 12,500 agents each tick, as
    # it did, took ~50 ms with the collections its garbage set off, every
    # tick while a declared hang lasts (docs/collector.md "Report relays").
    since = snap.now - silent_after_s
    quiet = sorted((node, info) for node, info in snap.agents.items() if info.last_seen < since)
    return tuple(SilentAgent(node, info.hostname, info.ranks, snap.now - info.last_seen)
                 for node, info in quiet if _any_alive(snap, info.ranks, node))


silent_agents = _silent_agents   # the watchdog's only look while a declared hang lasts


def _any_alive(snap: Snapshot, ranks, node: int) -> bool:
    for rank in ranks:
        entry = snap.ranks.get(rank)
        if entry is not None and entry.node_rank == node and entry.progress.alive:
            return True
    return False


def _hung_groups(snap: Snapshot, timeout_s: float, silent_nodes: set[int]) -> tuple[HungGroup, ...]:
    # One pass, grouped by the op's fields as a plain tuple: at 100,000 hung
    # ranks, building an OpKey per rank cost a third of this pass.
    now = snap.now
    world = snap.world_size
    groups: dict[tuple, list] = {}   # op fields -> [ranks, oldest age]
    for rank, entry in snap.ranks.items():
        if rank >= world:
            continue
        progress = entry.progress
        if not progress.alive or not progress.HasField("oldest_in_flight") or entry.node_rank in silent_nodes:
            continue
        op = progress.oldest_in_flight
        age = op.age_ns * 1e-9 + (now - entry.received)
        if age > timeout_s:
            key = (op.name, op.kind, op.comm_id, op.seq)
            found = groups.get(key)
            if found is None:
                groups[key] = [[rank], age]
            else:
                found[0].append(rank)
                if age > found[1]:
                    found[1] = age
    out = [HungGroup(OpKey(*key), tuple(sorted(ranks)), age) for key, (ranks, age) in groups.items()]
    out.sort(key=lambda g: (-len(g.ranks), g.ranks[0]))
    return tuple(out)


def comm_lane(progress, comm_id: int, lane: int):
    """The rank's CommProgress for one lane of one group, or None. Seqs of the
    collective and p2p lanes are unrelated (docs/records.md)."""
    for comm in progress.comms:
        if comm.comm_id == comm_id and comm.lane == lane:
            return comm
    return None


def _never_entered(snap: Snapshot, hung: tuple[HungGroup, ...], silent: set[int],
                   stuck: dict[tuple[int, int], int], members: dict | None = None) -> tuple[NeverEntered, ...]:
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
    this reads: at 100,000 ranks not read twice).
    """
    out: dict[int, NeverEntered] = {}
    missing: dict[tuple[int, int], set[int]] = {}   # (comm_id, kind) -> the members that never entered it
    for group in [g for g in hung if g.op.kind == KIND_COLLECTIVE][:MAX_GROUPS_EXPLAINED]:
        in_group = set(group.ranks)
        comm_id = group.op.comm_id
        # The exact stuck seq (divergence.py) where the members' completions give it.
        seq = max(group.op.seq, stuck.get((comm_id, group.op.kind), 0))
        op = group.op if seq == group.op.seq else dataclasses.replace(group.op, seq=seq)
        known = (members or {}).get((comm_id, KIND_COLLECTIVE))
        for rank, started in known.items() if known is not None else _live_started(snap, comm_id):
            if started < seq and rank not in in_group and rank not in silent:
                missing.setdefault((comm_id, group.op.kind), set()).add(rank)
                if rank not in out and not _waited_first(snap.ranks[rank], snap.now, group):
                    out[rank] = NeverEntered(rank, op, started)
    if len(out) > 1:
        _break_cycles(snap, hung, out)
        _follow_waits(hung, out, missing)
    return tuple(out[r] for r in sorted(out))


def _follow_waits(hung: tuple[HungGroup, ...], out: dict[int, NeverEntered], missing: dict) -> None:
    """A rank that never entered one hung op but waits in another, for a member
    that never entered that one, only waits: following whom each waits for
    ends at a rank in no collective, and that rank is the culprit (``out``
    loses the waiters). torchtitan, rank 3 stalled in its data loader: rank 1
    waits for it in the batch group's token-count all-reduce (step start),
    rank 0 for rank 1 in the tensor-parallel group's reduce-scatter (the
    forward); the ops started milliseconds apart, closer than the ages in
    the reports can tell (``_waited_first``). A wait that comes back to the
    rank is a cycle: ``_break_cycles``' to judge, and the rank stays."""
    in_op = {}
    for g in hung:
        for r in g.ranks:
            in_op[r] = (g.op.comm_id, g.op.kind)
    for rank in list(out):
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


def _break_cycles(snap: Snapshot, hung: tuple[HungGroup, ...], out: dict[int, NeverEntered]) -> None:
    """Two ranks, each in flight in a hung op the other never entered, each
    waiting for the other: the one that ran past the op that comes first in
    a step is the culprit, the other only waits (``out`` loses its entry).

    Megatron, a tensor-parallel all-reduce skipped on rank 1: all of a
    layer's TP all-reduces are one size, so nothing in the TP lane differs;
    rank 1 ran on into the distributed optimizer's all-reduce, where it waits
    for rank 0, in the TP all-reduce waiting for rank 1, since the same
    moment. Which op comes first in a step says who ran past what: the ranks'
    own earlier steps tell it (``CommProgress.recent_steps``). No call where
    the steps do not show one order."""
    in_op = {}
    for g in hung:
        for r in g.ranks:
            in_op[r] = (g.op.comm_id, g.op.kind)
    # (never entered, waits in) -> ranks: one pass, as at 100,000 ranks most
    # never-entered ranks wait in nothing and none of this is read for them.
    pairs: dict[tuple, list[int]] = {}
    for rank, n in out.items():
        waits = in_op.get(rank)
        if waits is not None:
            pairs.setdefault(((n.op.comm_id, n.op.kind), waits), []).append(rank)
    for (x, y), ps in pairs.items():       # each p waits in y, never entered x
        rs = pairs.get((y, x), ())          # each r waits in x, never entered y
        if not rs or x >= y:                # each pair of ops once
            continue
        p, r = ps[0], rs[0]
        first = _first_in_step(snap, (p, r), x, y)
        if first == x:                      # p ran past x into y: the rs only wait in x
            for rank in rs:
                out.pop(rank, None)
        elif first == y:
            for rank in ps:
                out.pop(rank, None)


def _first_in_step(snap: Snapshot, ranks, x: tuple[int, int], y: tuple[int, int]):
    """``x`` or ``y``: the lane whose ops all come before the other's within
    each earlier step both ran on these ranks (their fingerprint windows); None
    where no step shows both, or the steps disagree."""
    seen = set()
    for rank in ranks:
        entry = snap.ranks.get(rank)
        if entry is None:
            return None
        lanes = []
        for comm_id, kind in (x, y):
            comm = comm_lane(entry.progress, comm_id, kind)
            if comm is None or not comm.HasField("recent_steps"):
                return None
            by_step: dict[int, list[int]] = {}
            for step, into in zip(comm.recent_steps.step, comm.recent_steps.into_step_ns):
                if into:
                    by_step.setdefault(step, []).append(into)
            lanes.append(by_step)
        current = max((s for lane in lanes for s in lane), default=0)
        for step in set(lanes[0]) & set(lanes[1]):
            if step == current:
                continue                    # the step the hang is in: the order is what is asked
            xs, ys = lanes[0][step], lanes[1][step]
            if max(xs) < min(ys):
                seen.add(x)
            elif max(ys) < min(xs):
                seen.add(y)
            else:
                return None
    return seen.pop() if len(seen) == 1 else None


def _live_started(snap: Snapshot, comm_id: int):
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


def _suspects(snap: Snapshot, skip: set[int], never: tuple[NeverEntered, ...],
              silent: tuple[SilentAgent, ...], names: dict[int, str]) -> tuple[Suspect, ...]:
    # Before the HANG line, and one per rank where the rest of a 100,000-rank
    # job never entered the op: sorted once at the end, each reason made once.
    out = []
    now, world = snap.now, snap.world_size
    for rank, entry in snap.ranks.items():
        if rank in skip or rank >= world:
            continue
        p = entry.progress
        alive = p.alive
        if alive and p.HasField("oldest_in_flight"):
            continue
        out.append(Suspect(rank, NOT_IN_ANY if alive else EXITED, p.last_op or None,
                           p.idle_ns * 1e-9 + (now - entry.received)))
    idle = {s.rank for s in out}
    reasons: dict[OpKey, str] = {}
    for n in never:
        if n.rank not in idle:
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


class HangDetector:
    """Fires once per hang event and re-arms when progress resumes.

    An event is remembered as (rank -> pid, op) for the ranks hung when it
    fired. It is over when none of them is still in that op with that pid:
    the ops completed, or the workers restarted (new pids). Ranks whose agent
    is silent count as still stuck (no news is not progress). Silent agents
    are announced once per silence and re-announced after they come back.
    """

    def __init__(self) -> None:
        self._event: dict[int, tuple[int, OpKey]] | None = None
        self._fired: tuple | None = None   # (hung groups, snapshot's ranks) the event's dict is built from
        self._silent_announced: set[int] = set()

    @property
    def armed(self) -> bool:
        return self._event is None

    def update(self, findings: Findings, snap: Snapshot) -> tuple[bool, bool, list[SilentAgent]]:
        """Returns (fire, rearmed, newly_silent) for this evaluation."""
        silent_now = {a.node_rank for a in findings.silent_agents}
        newly_silent = [a for a in findings.silent_agents if a.node_rank not in self._silent_announced]
        self._silent_announced = silent_now
        rearmed = False
        if self._event is not None and not self._still_stuck(snap, silent_now):
            self._event, self._fired, rearmed = None, None, True
        fire = self._event is None and findings.is_hang
        if fire:
            # Built at the next look, not now: at 100,000 hung ranks the dict
            # costs a fair part of a second the HANG line must not wait for.
            self._event, self._fired = {}, (findings.hung, snap.ranks)
        return fire, rearmed, newly_silent

    def _event_ranks(self) -> dict[int, tuple[int, OpKey]]:
        if self._fired is not None:
            hung, ranks = self._fired
            self._event, self._fired = {r: (ranks[r].progress.pid, g.op) for g in hung for r in g.ranks}, None
        return self._event

    def _still_stuck(self, snap: Snapshot, silent_nodes: set[int]) -> bool:
        for rank, (pid, op) in self._event_ranks().items():
            entry = snap.ranks.get(rank)
            if entry is None:
                continue  # its agent left cleanly: the job or node is done
            if entry.node_rank in silent_nodes:
                return True
            p = entry.progress
            if p.pid != pid or not p.alive or not p.HasField("oldest_in_flight"):
                continue
            cur = p.oldest_in_flight
            if (cur.name, cur.kind, cur.comm_id, cur.seq) == (op.name, op.kind, op.comm_id, op.seq):
                return True
        return False
