"""Rounds of pairs that pin each fault on one node (pure logic, no I/O).

Round 1 pairs units (0,1), (2,3), ...; with an odd count the last one waits.
A good pair proves both members healthy. A bad pair makes both suspects,
until one of them is proven healthy, which pins the fault on the other.
Later rounds pair every suspect (and any unit not yet tested) with a
proven-healthy unit; when there are not enough of those, suspects are paired
with each other, never twice with the same partner. docs/netcheck.md gives
the number of rounds this takes for one fault and for k faults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HEALTHY, SUSPECT, UNTESTED, FAULTY = "healthy", "suspect", "untested", "faulty"


@dataclass(frozen=True)
class PairOutcome:
    """One pair's result in a round: ``ok`` False for slow, failed or timed out."""

    a: int
    b: int
    ok: bool
    reason: str = ""


@dataclass
class Pinpointer:
    """State of the search. ``hosts[u]`` lets later rounds prefer partners on other hosts."""

    units: list[int]
    hosts: dict[int, str] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    max_rounds: int = 10
    status: dict[int, str] = field(default_factory=dict)
    faulty: dict[int, str] = field(default_factory=dict)
    tried: set[frozenset] = field(default_factory=set)
    bad_pairs: list[PairOutcome] = field(default_factory=list)
    rounds: int = 0

    def __post_init__(self) -> None:
        for u in self.units:
            self.status.setdefault(u, UNTESTED)

    def name(self, unit: int) -> str:
        return self.names.get(unit, str(unit))

    def mark_faulty(self, unit: int, reason: str) -> None:
        """Pin a fault found outside the pairing (node dropped out, GEMM too slow, ...)."""
        if self.status.get(unit) != FAULTY:
            self.status[unit] = FAULTY
            self.faulty[unit] = reason
            self._propagate()

    def plan(self) -> list[tuple[int, int]] | None:
        """Pairs for the next round, or None when the search is over."""
        if self.rounds == 0:
            live = [u for u in self.units if self.status[u] != FAULTY]
            pairs = [(live[i], live[i + 1]) for i in range(0, len(live) - 1, 2)]
        else:
            open_units = [u for u in self.units if self.status[u] in (SUSPECT, UNTESTED)]
            if not open_units:
                return None
            if self.rounds >= self.max_rounds:
                self._give_up(open_units, f"not separated after {self.rounds} rounds (--max-rounds)")
                return None
            pairs = self._repair(open_units)
            if not pairs:
                self._give_up(open_units, "no healthy node left to compare against")
                return None
        self.rounds += 1
        return pairs or None

    def record(self, outcomes: list[PairOutcome]) -> None:
        """Fold one round's outcomes into the state."""
        for o in outcomes:
            self.tried.add(frozenset((o.a, o.b)))
            if o.ok:
                for u in (o.a, o.b):
                    if self.status[u] != FAULTY:
                        self.status[u] = HEALTHY
            else:
                self.bad_pairs.append(o)
                for u in (o.a, o.b):
                    if self.status[u] in (UNTESTED, SUSPECT):
                        self.status[u] = SUSPECT
        self._propagate()

    def _propagate(self) -> None:
        """A bad pair with one proven-healthy member pins the other; repeat to a fixpoint."""
        changed = True
        while changed:
            changed = False
            for o in self.bad_pairs:
                for me, other in ((o.a, o.b), (o.b, o.a)):
                    if self.status[other] == HEALTHY and self.status[me] == SUSPECT:
                        self.status[me] = FAULTY
                        self.faulty[me] = f"{o.reason}; partner {self.name(other)} is healthy".lstrip("; ")
                        changed = True

    def _partner(self, unit: int, candidates: list[int]) -> int | None:
        fresh = [c for c in candidates if frozenset((unit, c)) not in self.tried]
        other_host = [c for c in fresh if self.hosts.get(c) != self.hosts.get(unit)]
        return (other_host or fresh or [None])[0]

    def _repair(self, open_units: list[int]) -> list[tuple[int, int]]:
        # Suspects from bad pairs go first: they are what the round is for.
        open_units = sorted(open_units, key=lambda u: self.status[u] != SUSPECT)
        healthy = [u for u in self.units if self.status[u] == HEALTHY]
        pairs, waiting = [], []
        for unit in open_units:
            partner = self._partner(unit, healthy)
            if partner is None:
                waiting.append(unit)
            else:
                healthy.remove(partner)
                pairs.append((unit, partner))
        while waiting:
            unit = waiting.pop(0)
            partner = self._partner(unit, waiting)
            if partner is not None:
                waiting.remove(partner)
                pairs.append((unit, partner))
        return pairs

    def _give_up(self, units: list[int], why: str) -> None:
        for u in units:
            if self.status[u] == UNTESTED and not any(u in (o.a, o.b) for o in self.bad_pairs):
                self.mark_faulty(u, f"untested: {why}")
                continue
            partners = sorted({o.b if o.a == u else o.a for o in self.bad_pairs if u in (o.a, o.b)})
            self.mark_faulty(u, f"failed with {', '.join(map(self.name, partners))}; {why}")
