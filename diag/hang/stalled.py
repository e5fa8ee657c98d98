"""The stalled rule: a rank whose oldest in-flight op is older than its wait
(--hang-timeout) is hung; if any rank is hung, the job is hung.

The op's age is ``age_ns`` at report time plus the time since the report
was built. Ranks reported ``alive = false`` have exited and silent agents'
ranks are stale (silent.py): neither is judged here. Ranks stuck in the same
op (name, kind, group, seq) form one :class:`HungGroup`.
"""

from __future__ import annotations

import dataclasses
import typing

from diag.hang.api import Case, Finding, Findings, HungGroup, OpKey, Rule, View


class StalledRule(Rule):
    name = "stalled"
    evidence = "each rank's oldest in-flight op and its age"

    def judge(self, case: Case) -> Findings:
        wait = self.wait_s(case.limits)
        silent = {a.node_rank for a in case.findings.silent_agents}
        aged = case.aged
        if aged is not None and aged.wait_s <= wait and aged.silent_nodes == silent:
            # The same view judged with a shorter wait (decide's probe): the
            # ops past this one are among those, in the same order
            aged = aged._replace(wait_s=wait, ops=[a for a in aged.ops if a[2] > wait])
        else:
            aged = in_flight_past(case.view, wait, silent)
        case.aged = aged
        hung = grouped(aged.ops)
        if not hung:
            return case.findings
        ranks = sum(len(g.ranks) for g in hung)
        return dataclasses.replace(case.findings, hung=hung, fired=case.findings.fired + (
            Finding(self.name, f"{ranks} rank(s) in {len(hung)} op(s) in flight past {wait:g} s"),))


class TimeoutRule(Rule):
    """The ``timeout`` verdict: an op in flight past --hang-timeout, whatever
    else is known. The bound for every hang no other verdict rule proves."""

    name = "timeout"
    evidence = "an op in flight past --hang-timeout"
    decides = True

    def judge(self, case: Case) -> Findings:
        found = case.findings
        if not found.hung:
            return found
        return self.decided(found, f"in flight past --hang-timeout {self.wait_s(case.limits):g} s")


class Aged(typing.NamedTuple):
    """The ranks' ops in flight past ``wait_s`` (ranks of ``silent_nodes``
    not judged): (op fields, rank, age) in the view's order of ranks. And
    what the pass read of every rank of the world on the way, for the rules
    after it (each read costs at 200,000 ranks): ``flying``, the live ranks
    with an op in flight, ``dead`` the ranks reported not alive."""

    wait_s: float
    silent_nodes: set[int]
    ops: list[tuple[tuple, int, float]]
    flying: set[int]
    dead: set[int]


def hung_groups(view: View, timeout_s: float, silent_nodes: set[int]) -> tuple[HungGroup, ...]:
    """The ops in flight longer than ``timeout_s``, largest group first."""
    return grouped(in_flight_past(view, timeout_s, silent_nodes).ops)


def in_flight_past(view: View, timeout_s: float, silent_nodes: set[int]) -> Aged:
    """One pass over the ranks: each op in flight longer than ``timeout_s``.
    A view whose ranks can say which may be (the collector's RankMap:
    ``maybe_past(now, wait_s)``, a superset) has those read first; where
    none is, nothing hangs, and ``flying`` and ``dead``, which only the
    rules that explain a hang read, are left empty (at 200,000 ranks the
    whole pass, near the timeout every tick, cost more than all the rest)."""
    maybe_past = getattr(view.ranks, "maybe_past", None)
    if maybe_past is not None and not _any_past(view, maybe_past(view.now, timeout_s), timeout_s, silent_nodes):
        return Aged(timeout_s, silent_nodes, [], set(), set())
    now = view.now
    world = view.world_size
    out, flying, dead = [], set(), set()
    for rank, entry in view.ranks.items():
        if rank >= world:
            continue
        progress = entry.progress
        if not progress.alive:
            dead.add(rank)
            continue
        if not progress.HasField("oldest_in_flight"):
            continue
        flying.add(rank)
        if entry.node_rank in silent_nodes:
            continue
        op = progress.oldest_in_flight
        age = op.age_ns * 1e-9 + (now - entry.received)
        if age > timeout_s:
            out.append(((op.name, op.kind, op.comm_id, op.seq), rank, age))
    return Aged(timeout_s, silent_nodes, out, flying, dead)


def _any_past(view: View, ranks, timeout_s: float, silent_nodes: set[int]) -> bool:
    """Whether an op of one of ``ranks`` is in flight past ``timeout_s``, as
    in_flight_past judges each rank."""
    now, world, entries = view.now, view.world_size, view.ranks
    for rank in ranks:
        entry = entries.get(rank)
        if entry is None or rank >= world or entry.node_rank in silent_nodes:
            continue
        progress = entry.progress
        if progress.alive and progress.HasField("oldest_in_flight") and \
                progress.oldest_in_flight.age_ns * 1e-9 + (now - entry.received) > timeout_s:
            return True
    return False


def grouped(ops: list[tuple[tuple, int, float]]) -> tuple[HungGroup, ...]:
    """``ops`` (in_flight_past) by op, largest group first."""
    # Grouped by the op's fields as a plain tuple: at 100,000 hung ranks,
    # building an OpKey per rank cost a third of this pass.
    groups: dict[tuple, list] = {}   # op fields -> [ranks, oldest age]
    for key, rank, age in ops:
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
