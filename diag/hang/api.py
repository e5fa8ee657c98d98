"""Contracts of the hang rules: what a rule sees, what it finds, and the rule itself.

Pure data and one abstract class. The rules (one module each) read a
:class:`View`, a read-only copy of every rank's progress and in-flight op,
and add to one :class:`Findings`; decide.py runs them and returns the
verdict. The collector renders it (diag/collector/verdict.py).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import operator
import typing

KIND_NAMES = {0: "unspecified", 1: "kernel", 2: "gemm", 3: "collective", 4: "p2p", 5: "host_func"}
KIND_COLLECTIVE = 3
KIND_P2P = 4
# Explaining a hang is O(world) per hung group; a pathological job with
# thousands of distinct hung ops is explained by its largest groups only.
MAX_GROUPS_EXPLAINED = 8
_FIRST = operator.itemgetter(0)   # a Suspect's or NeverEntered's rank


@dataclasses.dataclass(frozen=True)
class OpKey:
    """Identifies one operation across ranks: same name, group and seq."""

    name: str
    kind: int
    comm_id: int
    seq: int

    @property
    def is_comm_op(self) -> bool:
        return self.kind in (KIND_COLLECTIVE, KIND_P2P)


@dataclasses.dataclass(frozen=True)
class HungGroup:
    """Ranks stuck in the same operation longer than the timeout."""

    op: OpKey
    ranks: tuple[int, ...]
    max_age_s: float


class Suspect(typing.NamedTuple):
    """A rank that is not waiting with the others; usually the culprit.

    ``reason`` is a short phrase ("not in any collective", "never entered
    all_reduce (group 0, seq 41)", "agent silent for 7.0 s", "never reported").
    A named tuple, as NeverEntered: a hang at 100,000 ranks makes one per
    rank before its line, at half a frozen dataclass's cost.
    """

    rank: int
    reason: str
    last_op: str | None = None
    idle_s: float | None = None


class NeverEntered(typing.NamedTuple):
    """A member of a hung collective's group whose seq is behind it."""

    rank: int
    op: OpKey
    last_started_seq: int


@dataclasses.dataclass(frozen=True)
class Variant:
    """What some members of a group ran at one seq: ``op`` is the one-phrase
    description (``all_reduce 4 B (float32, sum)``), ``key`` the compared
    fields (name, bytes, dtype, reduce op, root/peer)."""

    key: tuple
    op: str
    ranks: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Ahead:
    """A member that started ops past the others (it skipped one and ran on)."""

    rank: int
    last_started_seq: int
    by: int


@dataclasses.dataclass(frozen=True)
class Skip:
    """Members that skipped ops the others ran at ``seq``: ``skipped`` says
    what (``all_reduce 4 B (float32, sum)``), ``evidence`` how it shows."""

    ranks: tuple[int, ...]
    seq: int
    skipped: str
    evidence: str


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """Where the members of a hung group stopped agreeing (docs/collector.md).

    ``stuck_seq`` is the first seq that no member completed; ``diverged_seq``
    the first seq at which the members' fingerprints differ (None when they
    agree wherever compared); ``minority`` the ranks outside the largest
    variant there, empty on a tie (``tie``: the largest variants are equal).
    """

    comm_id: int
    lane: int
    group: str
    members: tuple[int, ...]
    stuck_seq: int
    diverged_seq: int | None = None
    variants: tuple[Variant, ...] = ()
    minority: tuple[int, ...] = ()
    tie: bool = False
    ahead: tuple[Ahead, ...] = ()
    summary: str = ""
    skips: tuple[Skip, ...] = ()
    unpaired: tuple[str, ...] = ()      # p2p: sends whose peer's recv of the same number differs

    @property
    def culprits(self) -> tuple[int, ...]:
        """The ranks shown to have skipped ops; else the minority; on a tie,
        the ranks that ran ahead, if not all did. Without a divergence,
        running ahead alone blames no one: ranks launch asynchronously, and
        some launch more before a hang than others. Nor does it where the
        ops are async and overlapped (Megatron's tensor-parallel
        all-reduces): there the rank that skipped one is the one behind, and
        only the skip evidence names it."""
        if self.skips:
            return tuple(sorted({r for s in self.skips for r in s.ranks}))
        if self.minority:
            return self.minority
        ahead = tuple(a.rank for a in self.ahead)
        return ahead if self.diverged_seq is not None and 0 < len(ahead) < len(self.members) else ()


@dataclasses.dataclass(frozen=True)
class StuckAt:
    """The first seq of a hung group's lane that no member completed, for a
    hung op whose ranks all started it."""

    comm_id: int
    lane: int
    seq: int
    name: str
    from_seq: int   # the seq the hung op's ranks reported (a burst's first op)


@dataclasses.dataclass(frozen=True)
class GroupLabel:
    """A process group as users know it: its name and its folded member ranks."""

    comm_id: int
    name: str
    ranks: str

    def short(self) -> str:
        return f'"{self.name}"' if self.name else str(self.comm_id)

    def phrase(self) -> str:
        return f"{self.short()} (ranks {self.ranks})" if self.ranks else self.short()


@dataclasses.dataclass(frozen=True)
class SilentAgent:
    """An agent (node) with no report for longer than --silent-after."""

    node_rank: int
    hostname: str
    ranks: tuple[int, ...]
    silent_for_s: float


@dataclasses.dataclass(frozen=True)
class IdleStall:
    """No live rank started or finished any op for longer than --idle-timeout,
    and none has one in flight: all blocked outside any op.

    ``idle_s`` is the job-wide idle time (that of the most recently active
    rank); ``last_ops`` maps each idle rank to the name of its last op ("" if
    it never had one).
    """

    ranks: tuple[int, ...]
    idle_s: float
    last_ops: dict
    exited_ranks: tuple[int, ...] = ()
    missing_ranks: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class DeadlockWait:
    """Ranks blocked in one collective (``op``, at its stuck seq) and the
    members of its group that never started it, which they wait for."""

    op: OpKey
    ranks: tuple[int, ...]
    waits_for: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Deadlock:
    """Collectives whose missing members all wait in one another
    (deadlock.py): ``waits`` closed under "waits for". ``blocked``: every
    rank of it started nothing, launched nothing and, off the GPU, used no
    CPU for the rule's wait, which makes it proof. ``culprits``: the ranks
    whose op broke the order of their earlier steps, with that order's
    verdict (``broke``: rank -> order.Order); else none, and ``undecided``
    says why."""

    waits: tuple[DeadlockWait, ...]
    blocked: bool
    culprits: tuple[int, ...] = ()
    broke: dict = dataclasses.field(default_factory=dict)
    undecided: str = ""

    @property
    def ranks(self) -> list[int]:
        return sorted({r for w in self.waits for r in w.ranks})


class Finding(typing.NamedTuple):
    """What one rule found in one evaluation: the rule's name and its
    evidence in a phrase ("ranks 0-3: an op in flight past 300 s")."""

    rule: str
    evidence: str


@dataclasses.dataclass(frozen=True)
class Findings:
    """Everything one evaluation found; empty tuples mean "nothing"."""

    world_size: int
    hung: tuple[HungGroup, ...] = ()
    suspects: tuple[Suspect, ...] = ()
    never_entered: tuple[NeverEntered, ...] = ()
    silent_agents: tuple[SilentAgent, ...] = ()
    missing_ranks: tuple[int, ...] = ()
    mismatches: tuple[Mismatch, ...] = ()
    groups: tuple[GroupLabel, ...] = ()    # of the hung comm ops' groups
    stuck: tuple[StuckAt, ...] = ()
    idle: IdleStall | None = None          # the idle rule's stall (idle.py)
    deadlock: Deadlock | None = None       # collectives waiting for one another (deadlock.py)
    fired: tuple[Finding, ...] = ()        # what each rule found, in the order they ran
    verdict: Finding | None = None         # the verdict rule that decided the hang (decide.py), first in fired

    @property
    def rule(self) -> str | None:
        """The rule whose finding makes the verdict (the first that fired), or None."""
        return self.fired[0].rule if self.fired else None

    def stuck_at(self, op: OpKey) -> StuckAt | None:
        return next((s for s in self.stuck if (s.comm_id, s.lane, s.from_seq) == (op.comm_id, op.kind, op.seq)),
                    None)

    def label(self, comm_id: int) -> GroupLabel | None:
        return next((g for g in self.groups if g.comm_id == comm_id), None)

    @property
    def waited_s(self) -> float:
        """How long the oldest hung op has been in flight (0 when none hangs)."""
        return max((g.max_age_s for g in self.hung), default=0.0)

    @property
    def is_hang(self) -> bool:
        return bool(self.hung)

    def later(self, s: float) -> Findings:
        """These findings ``s`` seconds on with nothing else changed (a
        verdict judged ahead, declared a tick after its moment): the hung
        ops have waited that much longer."""
        return dataclasses.replace(self, hung=tuple(dataclasses.replace(g, max_age_s=g.max_age_s + s)
                                                    for g in self.hung))

    @property
    def hung_ranks(self) -> list[int]:
        return sorted({r for g in self.hung for r in g.ranks})

    @property
    def silent_ranks(self) -> list[int]:
        return sorted({r for a in self.silent_agents for r in a.ranks})

    @functools.cached_property
    def culprits(self) -> list[int]:
        """Ranks the others wait for: suspects, ranks behind in seq, silent or
        never-reporting ranks. Empty when every rank waits in the same op.
        Worked out once: the line, hang.json and the GPU clause each read it
        (100,000 ranks when the rest of a job never entered the op)."""
        ranks = set(map(_FIRST, self.suspects))   # both are tuples, the rank first
        ranks.update(map(_FIRST, self.never_entered))
        ranks |= {r for m in self.mismatches for r in m.culprits}
        if self.hung:
            ranks |= set(self.silent_ranks) | set(self.missing_ranks)
        return sorted(ranks)


# What a rule sees: structural types, met by the collector's Snapshot,
# RankEntry and AgentInfo and by plain named tuples in the tests.

class RankView(typing.Protocol):
    """One rank's latest report: ``progress`` is its RankProgress message
    (diag/pb/collector.proto: oldest in-flight op, per-lane seqs,
    fingerprints, idle time); ``received`` when the report was built, on the
    collector's monotonic clock; ``node_rank`` its agent's node."""

    @property
    def progress(self) -> typing.Any: ...
    @property
    def received(self) -> float: ...
    @property
    def node_rank(self) -> int: ...


class AgentView(typing.Protocol):
    """One agent's liveness: its host, its ranks, when it last reported."""

    @property
    def hostname(self) -> str: ...
    @property
    def ranks(self) -> tuple[int, ...]: ...
    @property
    def last_seen(self) -> float: ...


class View(typing.Protocol):
    """The read-only job view the rules judge, at monotonic time ``now``.
    Rules never write to it: the collector shares its entries with the live
    state."""

    @property
    def now(self) -> float: ...
    @property
    def world_size(self) -> int: ...
    @property
    def ranks(self) -> typing.Mapping[int, RankView]: ...
    @property
    def agents(self) -> typing.Mapping[int, AgentView]: ...


# Waits a proof holds are bounded by the timeout: an op past it is a verdict anyway.
PROOF_WAITS = ("proof_s", "blocked_s")


@dataclasses.dataclass(frozen=True)
class Limits:
    """The bounds, in seconds, that the rules' waits name (``Rule.wait``):
    --hang-timeout, --silent-after (already widened by the pacer under
    overload), --idle-timeout; ``proof_s`` how long the proof of a verdict
    rule must hold (diverged, deadlock, exited, frozen_link, gpu_fault,
    stuck_kernel); ``blocked_s`` --blocked-after. ``proofs``: whether the
    verdict rules look before the timeout at all (--verdicts evidence, and
    the collector's look is due)."""

    hang_timeout_s: float
    silent_after_s: float
    idle_timeout_s: float = float("inf")
    proof_s: float = 5.0
    blocked_s: float = 30.0
    proofs: bool = True

    @property
    def probe_s(self) -> float:
        """The least time an op must have waited before any verdict rule looks."""
        return min(self.proof_s, self.blocked_s)


@dataclasses.dataclass
class Case:
    """One evaluation: what the rules see and what the earlier ones found.
    ``members`` is scratch the divergence rule fills for the next ones:
    (comm_id, lane) -> {rank: the last seq it started} of the live members
    (read once: at 100,000 ranks a second pass costs a second). ``aged``:
    the stalled rule's ops in flight past a shorter wait on the same view,
    from an earlier case (stalled.py ``Aged``), for it to filter rather
    than read every rank again."""

    view: View
    limits: Limits
    findings: Findings
    members: dict = dataclasses.field(default_factory=dict)
    aged: typing.Any = None


class Rule(abc.ABC):
    """One hang rule: a pure function of a :class:`Case`.

    ``name`` is what a finding says fired; ``evidence`` what the rule reads,
    in words (docs/collector.md lists them); ``wait`` which of
    :class:`Limits` its evidence must hold (:meth:`wait_s`).
    ``explains``: the rule explains a hang that another found (it runs only
    while some op hangs). ``decides``: a verdict rule, whose finding makes
    the verdict (decide.py tries them in order, each once the hung op has
    waited its wait; the first that proves the hang decides)."""

    name: typing.ClassVar[str]
    evidence: typing.ClassVar[str]
    wait: typing.ClassVar[str] = "hang_timeout_s"
    explains: typing.ClassVar[bool] = False
    decides: typing.ClassVar[bool] = False

    def wait_s(self, limits: Limits) -> float:
        """How long the evidence must hold: the ``wait`` it names, a proof's never past the timeout."""
        wait = getattr(limits, self.wait)
        return min(wait, limits.hang_timeout_s) if self.wait in PROOF_WAITS else wait

    def explained(self, found: Findings, what: str | None, **fields) -> Findings:
        """``found`` with ``fields`` set and, unless ``what`` is None, this
        rule's Finding saying ``what`` fired: the return of every rule that
        explains a hang (``explains``)."""
        fired = found.fired + ((Finding(self.name, what),) if what is not None else ())
        return dataclasses.replace(found, fired=fired, **fields)

    def decided(self, found: Findings, what: str | None) -> Findings:
        """``found`` decided by this rule, ``what`` its evidence in a phrase;
        ``found`` itself when ``what`` is None (no proof): the return of
        every verdict rule (``decides``)."""
        if what is None:
            return found
        finding = Finding(self.name, what)
        return dataclasses.replace(found, verdict=finding, fired=(finding,) + found.fired)

    @abc.abstractmethod
    def judge(self, case: Case) -> Findings:
        """``case.findings`` with what this rule found added (the same object
        when it found nothing). Raises nothing on well-formed views."""
