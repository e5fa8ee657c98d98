"""Per-rank progress state built from progress records; no I/O, no threads.

The sampler feeds it records; the reporter turns it into RankProgress
messages. Time comes from a clock function so tests drive it synchronously.
"""

from __future__ import annotations

import dataclasses
import time

from diag.pb import collector_pb2 as pb
from diag.records import format as fmt


@dataclasses.dataclass
class InFlight:
    name: str
    kind: int
    producer: int
    comm_id: int
    seq: int
    start_ns: int
    nbytes: int
    comm_rank: int
    comm_size: int


@dataclasses.dataclass
class RankState:
    """One worker incarnation (rank + pid); replaced when torchrun restarts it."""
    rank: int
    local_rank: int
    world_size: int
    pid: int
    started_ns: int
    last_activity_ns: int
    last_op: str = ""
    in_flight: dict = dataclasses.field(default_factory=dict)   # (region, op_id) -> InFlight
    stats: dict = dataclasses.field(default_factory=dict)       # (name, kind) -> [n, total, max, bytes, flops]
    comms: dict = dataclasses.field(default_factory=dict)       # comm_id -> [started, completed, size]
    dropped: dict = dataclasses.field(default_factory=dict)     # region -> cumulative drops
    alive: bool = True


class NodeState:
    """Everything the agent knows about its node's ranks."""

    def __init__(self, clock=time.monotonic_ns):
        self.clock = clock
        self.ranks: dict[int, RankState] = {}
        self._region_rank: dict[str, tuple[int, int]] = {}   # region -> (rank, pid)
        self._region_producer: dict[str, int] = {}

    # -- regions ----------------------------------------------------------
    def add_region(self, region: str, header: fmt.Header) -> None:
        """A region appeared. A new pid for a known rank is a restarted worker:
        its state starts afresh (only if the region is newer than what we hold)."""
        self._region_rank[region] = (header.rank, header.pid)
        self._region_producer[region] = header.producer
        current = self.ranks.get(header.rank)
        if current is not None and (current.pid == header.pid
                                    or current.started_ns > header.start_mono_ns):
            return
        self.ranks[header.rank] = RankState(
            header.rank, header.local_rank, header.world_size, header.pid,
            header.start_mono_ns, header.start_mono_ns)

    def remove_region(self, region: str) -> None:
        self._region_rank.pop(region, None)
        self._region_producer.pop(region, None)

    def mark_exited(self, pid: int) -> None:
        for state in self.ranks.values():
            if state.pid == pid:
                state.alive = False
                state.in_flight.clear()

    def _owner(self, region: str) -> RankState | None:
        rank_pid = self._region_rank.get(region)
        if rank_pid is None:
            return None
        state = self.ranks.get(rank_pid[0])
        return state if state is not None and state.pid == rank_pid[1] else None

    # -- records ----------------------------------------------------------
    def set_dropped(self, region: str, dropped: int) -> None:
        state = self._owner(region)
        if state is not None:
            state.dropped[region] = dropped

    def apply(self, region: str, records) -> None:
        state = self._owner(region)
        if state is None:
            return
        producer = self._region_producer.get(region, 0)
        for rec in records:
            if rec.event == fmt.EVENT_START:
                self._start(state, region, producer, rec)
            elif rec.event == fmt.EVENT_END:
                self._end(state, region, rec)
            elif rec.event == fmt.EVENT_COUNT:
                # Kernel launches are work too: a GPU rank launching kernels is not idle.
                state.last_activity_ns = max(state.last_activity_ns, rec.t_mono_ns)
                self._stat(state, rec.name, rec.kind, rec.count, 0, 0, 0)

    def _start(self, state, region, producer, rec) -> None:
        state.in_flight[(region, rec.op_id)] = InFlight(
            rec.name, rec.kind, producer, rec.comm_id, rec.seq, rec.t_mono_ns, rec.bytes,
            rec.comm_rank, rec.comm_size)
        state.last_activity_ns = max(state.last_activity_ns, rec.t_mono_ns)
        state.last_op = rec.name
        if rec.seq:
            comm = state.comms.setdefault(rec.comm_id, [0, 0, rec.comm_size])
            comm[0] = max(comm[0], rec.seq)
            comm[2] = rec.comm_size

    def _end(self, state, region, rec) -> None:
        state.in_flight.pop((region, rec.op_id), None)
        state.last_activity_ns = max(state.last_activity_ns, rec.t_mono_ns)
        self._stat(state, rec.name, rec.kind, 1, rec.duration_ns, rec.bytes, rec.flops)
        if not rec.seq:
            return
        comm = state.comms.setdefault(rec.comm_id, [rec.seq, 0, rec.comm_size])
        comm[1] = max(comm[1], rec.seq)
        # Ops of one communicator end in order (docs/records.md): this END
        # means any earlier op still listed lost its END record to a full ring.
        stale = [key for key, op in state.in_flight.items()
                 if key[0] == region and op.comm_id == rec.comm_id and 0 < op.seq < rec.seq]
        for key in stale:
            del state.in_flight[key]

    @staticmethod
    def _stat(state, name, kind, count, dur, nbytes, flops) -> None:
        s = state.stats.setdefault((name, kind), [0, 0, 0, 0, 0])
        s[0] += count
        s[1] += dur
        s[2] = max(s[2], dur)
        s[3] += nbytes
        s[4] += flops

    # -- reports ----------------------------------------------------------
    def pid_of(self, rank: int) -> int | None:
        state = self.ranks.get(rank)
        return state.pid if state is not None and state.alive else None

    def report(self) -> list[pb.RankProgress]:
        """RankProgress for every rank; per-op stats are deltas since the last call."""
        now = self.clock()
        out = []
        for rank in sorted(self.ranks):
            out.append(self._rank_progress(self.ranks[rank], now))
            self.ranks[rank].stats = {}
        return out

    @staticmethod
    def _rank_progress(state: RankState, now: int) -> pb.RankProgress:
        msg = pb.RankProgress(
            rank=state.rank, local_rank=state.local_rank, world_size=state.world_size,
            pid=state.pid, alive=state.alive, dropped_records=sum(state.dropped.values()),
            idle_ns=max(0, now - state.last_activity_ns), last_op=state.last_op)
        if state.in_flight:
            op = min(state.in_flight.values(), key=lambda o: o.start_ns)
            msg.oldest_in_flight.CopyFrom(pb.InFlightOp(
                name=op.name, kind=op.kind, producer=op.producer, comm_id=op.comm_id,
                seq=op.seq, age_ns=max(0, now - op.start_ns), bytes=op.nbytes,
                comm_rank=op.comm_rank, comm_size=op.comm_size))
        for (name, kind), (n, total, mx, nbytes, flops) in sorted(state.stats.items()):
            msg.stats.add(name=name, kind=kind, count=n, total_ns=total, max_ns=mx,
                          bytes=nbytes, flops=flops)
        for comm_id, (started, completed, size) in sorted(state.comms.items()):
            msg.comms.add(comm_id=comm_id, last_started_seq=started,
                          last_completed_seq=completed, comm_size=size)
        return msg
