"""The job-wide view: latest progress per rank and liveness per agent.

Ingest is the hot path (thousands of NodeReports a second): it validates the
ranks of one report and stores references to the received protobuf messages,
O(ranks in report), under one short lock. Nothing is evaluated here; the
watchdog takes a :class:`Snapshot` twice a second and runs the rules on it.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from diag.pb import collector_pb2 as pb

MAX_WORLD_SIZE = 1 << 22


class ReportError(ValueError):
    """A NodeReport that breaks the contract; the message names the field."""


class RankEntry(NamedTuple):
    """One rank's latest progress; ``received`` is the collector's monotonic time."""

    progress: pb.RankProgress
    received: float
    node_rank: int


class AgentInfo(NamedTuple):
    """One agent's latest report; replaced (never mutated) on every report."""

    node_rank: int
    hostname: str
    agent_pid: int
    last_seen: float
    ranks: tuple[int, ...]
    connected: bool


class Snapshot(NamedTuple):
    """A consistent copy of the state at monotonic time ``now``. The entries
    are shared with the live state but immutable, so copying is O(ranks)."""

    now: float
    world_size: int
    ranks: dict[int, RankEntry]
    agents: dict[int, AgentInfo]


class JobState:
    """Thread-safe store fed by every Connect stream, read by the watchdog."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranks: dict[int, RankEntry] = {}
        self._agents: dict[int, AgentInfo] = {}
        self._world_size = 0
        self.reports = 0  # total NodeReports ingested (for the bench and logs)

    def ingest(self, report: pb.NodeReport, now: float) -> None:
        """Store one report received at monotonic ``now``.

        Raises ReportError, and stores nothing, when a rank or world size is
        out of range or the ranks disagree on the world size.
        """
        ranks = report.ranks
        world = ranks[0].world_size if ranks else self._world_size
        node = report.node_rank
        if node < 0:
            raise ReportError(f"node_rank {node} is negative")
        for r in ranks:
            if r.world_size != world or not 0 < world <= MAX_WORLD_SIZE or not 0 <= r.rank < world:
                raise ReportError(f"rank {r.rank} with world_size {r.world_size} from node {node} is out of range "
                                  f"(the report's first rank says world_size {world})")
        info = AgentInfo(node, report.hostname, report.agent_pid, now, tuple(r.rank for r in ranks), True)
        with self._lock:
            for r in ranks:
                self._ranks[r.rank] = RankEntry(r, now, node)
            self._agents[node] = info
            if ranks:
                self._world_size = world
            self.reports += 1

    def agent_left(self, node_rank: int, agent_pid: int) -> None:
        """The agent's stream ended. Its ranks are kept: if it does not come
        back, they turn silent after --silent-after. (A stream's end cannot
        tell a crash from a goodbye reliably; an agent whose workers exited
        says so with ``alive = false`` in its last report instead.)"""
        with self._lock:
            info = self._agents.get(node_rank)
            if info is not None and info.agent_pid == agent_pid:
                self._agents[node_rank] = info._replace(connected=False)

    def snapshot(self, now: float) -> Snapshot:
        with self._lock:
            return Snapshot(now, self._world_size, dict(self._ranks), dict(self._agents))
