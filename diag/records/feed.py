"""The protocol through which the agent's state feeds its per-rank views.

``NodeState`` (``diag/agent/state.py``) reads every region's records and
owns the regions: it decides which worker incarnation of a rank a region's
records belong to (docs/agent.md, "A restarted worker"). The views it keeps
up to date, the perf window (``diag/perf/window.py``) and the timeline ring
(``diag/timeline/ring.py``), get only the records of regions a rank's current
worker owns, with the rank and producer already resolved, so they keep no
region table of their own. Declared here, below both, so neither view nor
the agent imports the other.
"""

from __future__ import annotations

import typing

from diag.records.format import Header, Record


class RankFeed(typing.Protocol):
    """A per-rank view of the records; called under the agent's lock."""

    def start_rank(self, header: Header) -> None:
        """A worker took ``header.rank``: its first region, or a restart. What
        the previous worker of the rank had in flight will never end."""

    def apply(self, rank: int, region: str, producer: int,
              records: typing.Sequence[Record]) -> None:
        """New records (never none) of one of the rank's regions, in the
        order its producer wrote them."""

    def set_dropped(self, rank: int, region: str, dropped: int) -> None:
        """The region's running count of records its full ring dropped."""

    def remove_region(self, rank: int, region: str) -> None:
        """The region is gone (its worker exited, or it cannot be read): its
        ops in flight will never end."""
