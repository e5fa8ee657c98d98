"""Contracts shared by the collector's parts: what the rules find.

Pure data, no behaviour beyond a few derived views. ``rules.analyse`` makes a
:class:`Findings`; ``verdict`` turns it into the HANG line and hang.json.
"""

from __future__ import annotations

import dataclasses

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


@dataclasses.dataclass(frozen=True)
class Suspect:
    """A rank that is not waiting with the others; usually the culprit.

    ``reason`` is a short phrase ("not in any collective", "never entered
    all_reduce (group 0, seq 41)", "agent silent for 7.0 s", "never reported").
    """

    rank: int
    reason: str
    last_op: str | None = None
    idle_s: float | None = None


@dataclasses.dataclass(frozen=True)
class NeverEntered:
    """A member of a hung collective's group whose seq is behind it."""

    rank: int
    op: OpKey
    last_started_seq: int


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

    @property
    def is_hang(self) -> bool:
        return bool(self.hung)

    @property
    def hung_ranks(self) -> list[int]:
        return sorted({r for g in self.hung for r in g.ranks})

    @property
    def silent_ranks(self) -> list[int]:
        return sorted({r for a in self.silent_agents for r in a.ranks})

    @property
    def culprits(self) -> list[int]:
        """Ranks the others wait for: suspects, ranks behind in seq, silent or
        never-reporting ranks. Empty when every rank waits in the same op."""
        ranks = {s.rank for s in self.suspects} | {n.rank for n in self.never_entered}
        if self.hung:
            ranks |= set(self.silent_ranks) | set(self.missing_ranks)
        return sorted(ranks)
