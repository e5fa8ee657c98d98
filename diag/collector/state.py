"""The job-wide view: latest progress per rank and liveness per agent.

Ingest is the hot path (12,500 NodeReports a second at 100,000 GPUs): it
validates the ranks of one report and stores references to the received
protobuf messages, O(ranks in report), under one short lock. Nothing is
judged here. What ingest does keep is what lets the watchdog's tick cost
nothing for healthy ranks:

* an index of in-flight ops by the second they started, so a tick looks only
  at ranks whose op may be older than the timeout (``expired``);
* the agents in order of their last report, so a tick looks only at agents
  that may be silent (``quiet_agents``);
* the job's latest activity, so the idle rule is run only when the job may be
  idle (``active_at``);
* how long reports waited before ingest (``lag``), from the agents' clocks.

The watchdog takes a full :class:`Snapshot` only when one of these says the
rules may fire, and runs the (unchanged, pure) rules on it.

Ingest keeps each node's newest report (and the newest that carried the perf
window) as a :class:`KeptReport`; a snapshot shares those, node by node
(:class:`RankMap`), and a rank's entry is made when it is read. A report
relay's plain report (digest.py) is not even parsed until then. Near the
timeout the watchdog takes a snapshot every tick, and at 200,000 ranks making
every entry of every node that reported cost 0.3-0.7 s of each; the rules
read whole only the ranks whose op may be past their wait
(``RankMap.maybe_past``), the rest when something hangs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import ItemsView, Mapping, ValuesView
from typing import NamedTuple

from google.protobuf.message import DecodeError

from diag.pb import collector_pb2 as pb

log = logging.getLogger("diag.collector")

MAX_WORLD_SIZE = 1 << 22
# An agent's monotonic clock may run slower than ours (tens of ppm). The
# learned offset may rise this fast, so a drifting clock never makes a report
# look older than it is; it is far above any clock's drift.
OFFSET_LEAK_PER_S = 1e-3
# A later report of the same op that dates its start this much earlier
# re-files it (the clock offset was learned better meanwhile).
REFILE_S = 0.5
# Ops are filed once a report shows them in flight this long: most ops end
# within milliseconds, and a hung one is reported again (older) a report
# interval later, long before any sane --hang-timeout (the watchdog's full
# pass every few seconds is the safety net).
FILE_AFTER_NS = 1_000_000_000
FILE_AFTER_S = FILE_AFTER_NS * 1e-9
# A rank's op start or end moves by the report's transit time and the learned
# clock offset from one report to the next; more than this is something done
# (``JobState.progress_at``).
PROGRESS_SLACK_S = 0.25


class ReportError(ValueError):
    """A NodeReport that breaks the contract; the message names the field."""


class RankEntry(NamedTuple):
    """One rank's latest progress. ``received`` is when its report was built,
    on the collector's monotonic clock (the arrival time for agents that send
    no ``sent_mono_ns``). ``perf`` is the latest performance window, from
    this report or an earlier one (agents told to pace send it with one report
    in N), ``perf_at`` when that report was built."""

    progress: pb.RankProgress
    received: float
    node_rank: int
    # the report that carried ``perf`` (read lazily: ingest is hot): the
    # rank's own progress, or that report as kept
    perf_from: pb.RankProgress | KeptReport | None = None
    perf_at: float = 0.0

    @property
    def perf(self) -> pb.PerfRank | None:
        # Checked here, not at ingest (100,000 ranks a second): the report
        # that carried the window, if it did, from this same process.
        came = self.perf_from
        if type(came) is KeptReport:
            came = came.rank(self.progress.rank)
        if came is None or not came.HasField("perf") or (came is not self.progress and came.pid != self.progress.pid):
            return None
        return came.perf


class KeptReport:
    """A node's report as ingest kept it: its ranks, parsed at ingest, or a
    relay's bytes, parsed when a rank of it is first read (by any thread:
    the ranks are published before the bytes are let go). ``bound``: the
    oldest in-flight op of a live rank, seconds old when the report was
    built, at most (None: no op in flight); what lets a snapshot pass over
    the node when no op of it can be near a wait. ``ids``: its ranks."""

    __slots__ = ("_data", "_node", "_ranks", "bound", "ids")

    def __init__(self, data: bytes | list, node: int, bound: float | None, ids: tuple) -> None:
        self._data, self._node, self.bound, self.ids = data, node, bound, ids
        self._ranks: dict | None = None

    def rank(self, rank: int) -> pb.RankProgress | None:
        ranks = self._ranks
        if ranks is None:
            data = self._data
            if data is None:   # another thread parsed it meanwhile
                ranks = self._ranks
            else:
                ranks = {r.rank: r for r in _ranks_of(data, self._node)}
                self._ranks = ranks
                self._data = None
        return ranks.get(rank)


class AgentInfo(NamedTuple):
    """One agent's latest report; replaced (never mutated) on every report.
    ``last_seen`` is when it came, ``sent`` when it was built (both on the
    collector's clock)."""

    node_rank: int
    hostname: str
    agent_pid: int
    last_seen: float
    ranks: tuple[int, ...]
    connected: bool
    sent: float = 0.0


class Snapshot(NamedTuple):
    """A consistent copy of the state at monotonic time ``now``. The entries
    and kept reports are shared with the live state but immutable; copying
    is O(ranks) in C, and a rank's entry is made when read (RankMap).
    ``mark``: the state's :meth:`JobState.mark` as it was taken."""

    now: float
    world_size: int
    ranks: Mapping[int, RankEntry]
    agents: dict[int, AgentInfo]
    mark: tuple = ()


class RankMap(Mapping):
    """A snapshot's ranks: rank -> RankEntry, made when read from the kept
    report of the rank's node (``pending``: node -> what ``JobState._keep``
    keeps), or the entry made at the last settle where the node has not
    reported since. The first pass over every rank makes them all, once
    for the passes after it (the rules that explain a hang read every rank
    several times). Read-only, safe from any thread."""

    __slots__ = ("_settled", "_pending", "_agents", "_orphans", "_every")

    def __init__(self, settled: dict, pending: dict, agents: dict, orphans: frozenset) -> None:
        self._settled, self._pending, self._agents, self._orphans = settled, pending, agents, orphans
        self._every: dict[int, RankEntry] | None = None

    def __getitem__(self, rank: int) -> RankEntry:
        every = self._every
        if every is not None:
            return every[rank]
        old = self._settled[rank]
        kept = self._pending.get(old.node_rank)
        return old if kept is None else _entry(rank, old, kept)

    def get(self, rank: int, default=None):
        every = self._every
        if every is not None:
            return every.get(rank, default)
        old = self._settled.get(rank)
        if old is None:
            return default
        kept = self._pending.get(old.node_rank)
        return old if kept is None else _entry(rank, old, kept)

    def __contains__(self, rank) -> bool:
        return rank in self._settled

    def __iter__(self):
        return iter(self._settled)

    def __len__(self) -> int:
        return len(self._settled)

    def items(self):
        every = self._every
        return every.items() if every is not None else _Items(self)

    def values(self):
        every = self._every
        return every.values() if every is not None else _Values(self)

    def maybe_past(self, now: float, wait_s: float) -> list[int]:
        """The ranks whose op may have been in flight longer than ``wait_s``
        at ``now``: a superset, O(nodes). A node whose kept report bounds its
        ops' age (KeptReport.bound) below the wait, however old the report,
        is passed over without parsing it."""
        pending, out = self._pending, list(self._orphans)
        for node, info in self._agents.items():
            kept = pending.get(node)
            if kept is not None:
                bound = kept[0].bound
                if bound is None or bound + (now - kept[1]) <= wait_s:
                    continue
            out.extend(info.ranks)
        return out

    def _made(self):
        """(rank, entry) of every rank, made as the caller reads them: a rule
        that stops at the first rank (the idle rule, most ticks) makes one.
        A pass that reads to the end keeps them all for the passes after it
        (two threads at once make the same)."""
        every, pending = {}, self._pending
        for rank, old in self._settled.items():
            kept = pending.get(old.node_rank)
            entry = every[rank] = old if kept is None else _entry(rank, old, kept)
            yield rank, entry
        self._every = every


class _Items(ItemsView):
    def __iter__(self):
        return self._mapping._made()


class _Values(ValuesView):
    def __iter__(self):
        return (entry for _, entry in self._mapping._made())


def _entry(rank: int, old: RankEntry | None, kept: tuple) -> RankEntry | None:
    """Rank ``rank``'s entry from its node's ``kept`` (JobState._keep): the
    report's progress, with the perf window of the newest report that had
    one, or the one ``old`` had. ``old`` where the report lacks the rank (it
    no longer parses)."""
    report, sent, perf, perf_at, perf_ids, node = kept
    progress = report.rank(rank)
    if progress is None:
        return old
    if perf is report:
        return _new(RankEntry, (progress, sent, node, progress, sent))
    if perf is not None and rank in perf_ids:
        return _new(RankEntry, (progress, sent, node, perf, perf_at))
    if old is not None and old.perf_from is not None:
        return _new(RankEntry, (progress, sent, node, old.perf_from, old.perf_at))
    return _new(RankEntry, (progress, sent, node, None, 0.0))


_new = tuple.__new__   # RankEntry's own __new__ is a Python function


class AgentClock:
    """When an agent's reports were built, on the collector's clock.

    The offset between the agent's monotonic clock and ours is learned as the
    least (arrival - sent) seen: never less than the true offset, so a
    report's build time is never placed earlier than it was, and an op's age
    is never over-estimated (no false HANG from a late report)."""

    __slots__ = ("offset", "at")

    def __init__(self) -> None:
        self.offset: float | None = None
        self.at = 0.0

    def sent_at(self, sent_mono_ns: int, now: float) -> float:
        if not sent_mono_ns:
            return now
        sent = sent_mono_ns * 1e-9
        seen = now - sent
        if self.offset is None or seen < self.offset + (now - self.at) * OFFSET_LEAK_PER_S:
            self.offset = seen
        else:
            self.offset += (now - self.at) * OFFSET_LEAK_PER_S
        self.at = now
        return sent + self.offset


class JobState:
    """Thread-safe store fed by every Connect stream, read by the watchdog."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranks: dict[int, RankEntry] = {}   # made from _pending when a node's ranks change (_settle)
        # node -> (newest KeptReport, when built, the newest with the perf
        # window or None, when built, that one's ranks, node), in order of
        # ingest, since the last _settle: what RankMap makes entries from.
        self._pending: dict[int, tuple] = {}
        self._settling = threading.Lock()   # one _settle at a time, outside _lock for the most of it
        self._known: set[int] = set()   # every rank ever reported (len(_ranks) once settled)
        self._orphans: set[int] = set()   # ranks their node no longer reports and no other took (maybe_past)
        self._agents: dict[int, AgentInfo] = {}   # in order of last report (oldest first)
        self._world_size = 0
        self.reports = 0  # total NodeReports ingested (for the bench and logs)
        self.coalesced = 0   # of them, those a relay sent a newer report of the node for (ingest.coalesced)
        # in-flight index: rank -> (op identity, start, start second); second -> ranks
        self._ops: dict[int, tuple[tuple, float, int]] = {}
        self._by_second: dict[int, set[int]] = {}
        self._expired: set[int] = set()
        self._cursor: int | None = None   # seconds up to this one are moved to _expired
        self.active_at = float("-inf")     # latest op start/end of any live rank seen
        self.lag_max = 0.0                 # longest wait of a report before ingest, since take_lag()
        self.lag_reports = 0
        self._dropped: dict[int, int] = {}   # rank -> dropped_records, ranks that ever dropped only
        self.exit_reports = 0   # reports of exited ranks: the failure pass looks only when it moves
        # What lets a verdict judged ahead of the timeout stand (mark()): the
        # changes that ages alone do not make, and the latest op start or end
        # of a live rank, moved only by more than PROGRESS_SLACK_S.
        self._moved = 0
        self._progress_at = float("-inf")
        self._exited: dict[int, int] = {}   # rank -> pid, ranks reported not alive

    def ingest(self, report: pb.NodeReport, now: float, clock: AgentClock | None = None,
               superseded: int = 0) -> None:
        """Store one report received at monotonic ``now`` (and count the
        ``superseded`` ones a relay sent it for: ingest.coalesced).

        Raises ReportError, and stores nothing, when a rank or world size is
        out of range or the ranks disagree on the world size.
        """
        ranks = report.ranks
        node = report.node_rank
        if node < 0:
            raise ReportError(f"node_rank {node} is negative")
        world = ranks[0].world_size if ranks else self._world_size
        rs = list(ranks)   # one wrapper per rank, for both passes
        ids = [r.rank for r in rs]
        for rank, r in zip(ids, rs):
            if r.world_size != world or not 0 < world <= MAX_WORLD_SIZE or not 0 <= rank < world:
                raise ReportError(f"rank {rank} with world_size {r.world_size} from node {node} is out of range "
                                  f"(the report's first rank says world_size {world})")
        sent = clock.sent_at(report.sent_mono_ns, now) if clock is not None else now
        ids = tuple(ids)
        info = AgentInfo(node, report.hostname, report.agent_pid, now, ids, True, sent)
        # Agents send the window for all their ranks or none (one report in N
        # when paced): one look per report, and a window carried over is
        # checked (same process, present) only when read (RankEntry.perf).
        perf = bool(rs) and rs[0].HasField("perf")
        changed = self._claims_change(node, ids)
        if changed:
            self._settle(self._holders(node, ids))
        kept = KeptReport(rs, node, None, ids)
        oldest = -1
        with self._lock:
            self._keep(node, kept, sent, perf, ids)
            dropped, ops, exited = self._dropped, self._ops, self._exited
            active_at = self.active_at
            moved_past = self._progress_at + PROGRESS_SLACK_S
            progress = float("-inf")
            for rank, r in zip(ids, rs):
                n = r.dropped_records
                if n or rank in dropped:
                    dropped[rank] = n
                if not r.alive:
                    self.exit_reports += 1
                    if exited.get(rank) != r.pid:
                        exited[rank] = r.pid
                        self._moved += 1
                    if rank in ops:
                        self._unfile(rank)
                    continue
                if exited and rank in exited:
                    del exited[rank]
                    self._moved += 1
                if r.HasField("oldest_in_flight"):
                    op = r.oldest_in_flight
                    age_ns = op.age_ns
                    if age_ns > oldest:
                        oldest = age_ns
                    if sent > active_at:
                        active_at = sent
                    start = sent - age_ns * 1e-9
                    if start > progress:
                        progress = start
                    if age_ns >= FILE_AFTER_NS:
                        self._file(rank, (r.pid, op.name, op.kind, op.comm_id, op.seq), start)
                        continue
                else:
                    active = sent - r.idle_ns * 1e-9
                    if active > active_at:
                        active_at = active
                    if active > progress:
                        progress = active
                if rank in ops:
                    self._unfile(rank)
            self.active_at = active_at
            if progress > moved_past:
                self._progress_at = progress
            if oldest >= 0:
                kept.bound = oldest * 1e-9
            self._reported(info, world if ranks else 0, now - sent, superseded)
        if changed:   # its ranks' entries made now: a snapshot finds each rank's node in them
            self._settle((node,))

    def ingest_digest(self, data: bytes, digest, now: float, clock: AgentClock | None = None) -> bool:
        """Store a relay's plain report (``data``, the NodeReport's bytes, and
        its ``digest``: digest.py) received at ``now``, as :meth:`ingest`
        would, without parsing it: that waits for the next snapshot.

        Returns False, and stores nothing, when the digest is out of range:
        the caller then ingests the parsed report, which says why."""
        node, world = digest.node_rank, digest.world_size
        ids = tuple(digest.ranks)
        if node < 0 or ids and not (0 < world <= MAX_WORLD_SIZE and min(ids) >= 0 and max(ids) < world):
            return False
        sent = clock.sent_at(digest.sent_mono_ns, now) if clock is not None else now
        info = tuple.__new__(AgentInfo, (node, digest.hostname, digest.agent_pid, now, ids, True, sent))
        changed = self._claims_change(node, ids)
        if changed:
            self._settle(self._holders(node, ids))
        # a plain report's ops are younger than FILE_AFTER_NS (digest.py)
        kept = KeptReport(data, node, FILE_AFTER_S if digest.in_flight else None, ids)
        with self._lock:
            self._keep(node, kept, sent, digest.perf, ids)
            dropped, ops, exited = self._dropped, self._ops, self._exited
            if dropped:   # none dropped now: a rank that had (a new process) is back at 0
                for rank in ids:
                    if rank in dropped:
                        dropped[rank] = 0
            if exited:   # every rank of a plain report is alive
                for rank in ids:
                    if exited.pop(rank, None) is not None:
                        self._moved += 1
            if ids:
                if digest.in_flight:   # an op younger than FILE_AFTER_S: when it started, at most
                    active = progress = sent
                else:
                    active = progress = sent - digest.min_idle_ns * 1e-9
                if active > self.active_at:
                    self.active_at = active
                if progress > self._progress_at + PROGRESS_SLACK_S:
                    self._progress_at = progress
            if ops:   # no op of these ranks is old enough to stay filed
                for rank in ids:
                    if rank in ops:
                        self._unfile(rank)
            self._reported(info, world if ids else 0, now - sent, digest.superseded)
        if changed:
            self._settle((node,))
        return True

    def _reported(self, info: AgentInfo, world: int, lag: float, superseded: int = 0) -> None:
        """The counts and indexes every report moves, under the lock; ``world``
        0 for a report with no ranks."""
        self._agents.pop(info.node_rank, None)   # re-insert: the dict stays in order of last report
        self._agents[info.node_rank] = info
        if world:
            self._world_size = world
        self.reports += 1 + superseded   # those a relay sent this one for count too (ingest.coalesced)
        self.coalesced += superseded
        if lag > self.lag_max:
            self.lag_max = lag
        self.lag_reports += 1

    def _claims_change(self, node: int, ids: tuple) -> bool:
        """Whether ``node`` reports other ranks than it did (or is new): the
        reports waiting are made entries first, so that a rank that moved
        between nodes keeps them in the order they came (and carries its perf
        window over as it did); and the ranks count at once (``size``)."""
        info = self._agents.get(node)
        if info is not None and info.ranks == ids:
            return False
        self._moved += 1
        self._known.update(ids)
        if info is not None:
            self._orphans.update(set(info.ranks).difference(ids))
        self._orphans.difference_update(ids)
        return True

    def _keep(self, node: int, report: KeptReport, sent: float, perf: bool, ids: tuple) -> None:
        """Keep ``report`` (``ids`` its ranks) as the node's newest, under
        the lock; its entries are made when a snapshot's are read."""
        pending = self._pending
        held = pending.pop(node, None)   # re-insert: the dict stays in order of ingest
        if perf:
            pending[node] = (report, sent, report, sent, ids, node)
        elif held is not None:
            pending[node] = (report, sent, held[2], held[3], held[4], node)
        else:
            pending[node] = (report, sent, None, 0.0, (), node)

    def _settle(self, nodes=None) -> None:
        """Make the rank entries of the reports kept since the last call
        (of ``nodes`` only, if given), in the order they came: when a node's
        ranks change (a rank that moved between nodes keeps its reports in
        the order they came, and carries its perf window over as it did),
        and when the collector paused. A snapshot reads the same before and
        after. Most of the work is done outside ``_lock`` (ingest goes on
        meanwhile), the rest, what came in meanwhile, under it."""
        with self._settling:
            self._settle_held(nodes)

    def _settle_held(self, nodes=None) -> None:
        with self._lock:
            pending = self._pending
            if nodes is None:
                self._pending = {}
            else:   # a few nodes: by when their reports were built, as they came but for lag
                found = sorted((pending.pop(n) for n in nodes if n in pending), key=lambda kept: kept[1])
                pending = {kept[5]: kept for kept in found}
        self._make_entries(pending)
        if nodes is None:
            with self._lock:
                if self._pending:
                    pending, self._pending = self._pending, {}
                    self._make_entries(pending)

    def _holders(self, node: int, ids: tuple) -> set[int]:
        """``node`` and the nodes whose entries hold ``ids`` now: what a
        change of ``node``'s ranks must settle first."""
        entries = self._ranks
        return {node} | {entries[r].node_rank for r in ids if r in entries}

    def _make_entries(self, pending: dict) -> None:
        entries = self._ranks
        for kept in pending.values():
            for rank in kept[0].ids:
                made = _entry(rank, entries.get(rank), kept)
                if made is not None:
                    entries[rank] = made

    def _file(self, rank: int, key: tuple, start: float) -> None:
        old = self._ops.get(rank)
        if old is not None and old[0] == key and start > old[1] - REFILE_S:
            return
        self._unfile(rank)
        self._moved += 1
        second = int(start)
        if self._cursor is not None and second <= self._cursor:
            self._expired.add(rank)
        else:
            self._by_second.setdefault(second, set()).add(rank)
        self._ops[rank] = (key, start, second)

    def _unfile(self, rank: int) -> None:
        old = self._ops.pop(rank, None)
        if old is None:
            return
        self._moved += 1
        ranks = self._by_second.get(old[2])
        if ranks is not None:
            ranks.discard(rank)
            if not ranks:
                del self._by_second[old[2]]
        self._expired.discard(rank)

    def expired(self, started_before: float) -> set[int]:
        """Ranks whose current in-flight op started before ``started_before``
        (at one-second grain: a superset). O(seconds elapsed + ranks returned);
        a cutoff earlier than the latest asked filters what is past the later
        one (O(those ranks))."""
        upto = int(started_before)
        with self._lock:
            if self._cursor is None:
                seconds = [s for s in self._by_second if s <= upto]
            else:
                seconds = range(self._cursor + 1, upto + 1)
            for s in seconds:
                ranks = self._by_second.pop(s, None)
                if ranks:
                    self._expired |= ranks
            if self._cursor is not None and upto < self._cursor:
                # An earlier cutoff than the cursor's (the hang timeout's, after
                # the evidence rules' shorter wait moved it on): only the ranks
                # filed at or before it.
                ops = self._ops
                return {r for r in self._expired if ops[r][2] <= upto}
            self._cursor = upto
            return set(self._expired)

    def quiet_agents(self, seen_before: float) -> list[int]:
        """Agents whose last report came before ``seen_before``, oldest first.
        O(agents returned): the dict is in order of last report."""
        out = []
        with self._lock:
            for node, info in self._agents.items():
                if info.last_seen >= seen_before:
                    break
                out.append(node)
        return out

    def dropped(self) -> dict[int, int]:
        """rank -> progress records dropped, for the ranks that dropped any."""
        with self._lock:
            return {r: n for r, n in self._dropped.items() if n}

    def take_lag(self) -> tuple[float, int]:
        """(longest wait of a report before ingest, reports) since the last call."""
        with self._lock:
            lag, n = self.lag_max, self.lag_reports
            self.lag_max, self.lag_reports = 0.0, 0
        return lag, n

    def agent_left(self, node_rank: int, agent_pid: int) -> None:
        """The agent's stream ended. Its ranks are kept: if it does not come
        back, they turn silent after --silent-after. (A stream's end cannot
        tell a crash from a goodbye reliably; an agent whose workers exited
        says so with ``alive = false`` in its last report instead.)"""
        with self._lock:
            info = self._agents.get(node_rank)
            if info is not None and info.agent_pid == agent_pid:
                self._agents[node_rank] = info._replace(connected=False)

    def forgive_pause(self, paused_s: float, now: float) -> None:
        """The collector itself did not run for ``paused_s`` up to ``now``
        (SIGSTOP, a VM frozen, no CPU): move every agent's last report and
        every rank's report time that much later (never past ``now``), so
        that time counts neither as the agents' silence nor as the ranks'
        idle or in-flight time. Reports that come in afterwards carry their
        own ages (the agents' clocks) and replace these as usual. O(ranks), once a pause."""
        def later(t: float) -> float:
            return min(t + paused_s, now)

        # _settling held throughout: a snapshot taken meanwhile on another
        # thread makes entries outside _lock, and would race these moves
        with self._settling:
            self._settle_held()
            with self._lock:
                for node, info in self._agents.items():   # all moved alike: the order of last report holds
                    self._agents[node] = info._replace(last_seen=later(info.last_seen), sent=later(info.sent))
                for rank, entry in self._ranks.items():
                    self._ranks[rank] = entry._replace(received=later(entry.received))
                if self.active_at != float("-inf"):
                    self.active_at = later(self.active_at)
                self._moved += 1

    def snapshot(self, now: float) -> Snapshot:
        """The state at ``now``: O(nodes) here, and a rank's entry made when
        read (RankMap). Under _settling: a settle on another thread makes
        entries outside _lock."""
        with self._settling, self._lock:
            agents = dict(self._agents)
            ranks = RankMap(dict(self._ranks), dict(self._pending), agents, frozenset(self._orphans))
            return Snapshot(now, self._world_size, ranks, agents, (self._moved, self._progress_at))

    def mark(self) -> tuple[int, float]:
        """(changes, latest progress): equal to a snapshot's ``mark`` while
        every report since says what the last one of its node said, ages
        apart: no op started or ended (beyond PROGRESS_SLACK_S of the latest
        seen), no rank exited or came back, no node's ranks changed, no
        pause forgiven. A verdict judged on that snapshot for a later time
        stands then (hang_pass.py)."""
        with self._lock:
            return self._moved, self._progress_at

    def first_start(self, ranks) -> float | None:
        """When the earliest filed op of ``ranks`` started (None: none filed)."""
        with self._lock:
            ops = self._ops
            return min((ops[r][1] for r in ranks if r in ops), default=None)

    @property
    def size(self) -> tuple[int, int]:
        """(agents, ranks) known."""
        return len(self._agents), len(self._known)


def _ranks_of(report, node: int) -> list:
    """A kept report's ranks: parsed at ingest, or a relay's bytes parsed now."""
    if type(report) is list:
        return report
    try:
        return list(pb.NodeReport.FromString(report).ranks)
    except DecodeError as exc:   # the relay parsed these very bytes: never expected
        log.warning("a relayed report of node %d no longer parses (%s); its ranks keep their last report",
                    node, exc)
        return []
