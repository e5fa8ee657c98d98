"""Contracts shared by the collector's parts: what the rules find.

Pure data, no behaviour beyond a few derived views. ``rules.analyse`` makes a
:class:`Findings`; ``verdict`` turns it into the HANG line and hang.json.
"""

from __future__ import annotations

import dataclasses
import functools
import typing

KIND_NAMES = {0: "unspecified", 1: "kernel", 2: "gemm", 3: "collective", 4: "p2p", 5: "host_func"}
KIND_COLLECTIVE = 3
KIND_P2P = 4


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
    and none has one in flight: all blocked outside any op (issue 13, item 5).

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

    def stuck_at(self, op: OpKey) -> StuckAt | None:
        return next((s for s in self.stuck if (s.comm_id, s.lane, s.from_seq) == (op.comm_id, op.kind, op.seq)),
                    None)

    def label(self, comm_id: int) -> GroupLabel | None:
        return next((g for g in self.groups if g.comm_id == comm_id), None)

    @property
    def is_hang(self) -> bool:
        return bool(self.hung)

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
        ranks = {s.rank for s in self.suspects} | {n.rank for n in self.never_entered}
        ranks |= {r for m in self.mismatches for r in m.culprits}
        if self.hung:
            ranks |= set(self.silent_ranks) | set(self.missing_ranks)
        return sorted(ranks)
