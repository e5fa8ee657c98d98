"""Per-rank progress state built from progress records; no I/O, no threads.

The sampler feeds it records, and it feeds its per-rank views (the perf
window, the timeline ring: diag/records/feed.py); the reporter turns it into
RankProgress messages. Time comes from a clock function so tests drive it
synchronously.
"""

from __future__ import annotations

import dataclasses
import time

from diag.agent import probes, procs
from diag.agent.comms import CommTable
from diag.pb import collector_pb2 as pb
from diag.perf.api import DEFAULT_STEP_NAME
from diag.records import format as fmt
from diag.records.feed import RankFeed
from diag.records.inflight import OpenOps

# A rank stuck this long in one op starts sending its fingerprints (the last
# ops per lane), so the collector can compare the members of a hung group;
# while it keeps up, its reports stay small.
FINGERPRINTS_AFTER_NS = 1_000_000_000
IN_FLIGHT_KINDS = (fmt.KIND_COLLECTIVE, fmt.KIND_P2P, fmt.KIND_HOST_FUNC)   # the /metrics gauge's ops


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
    flags: int = 0
    flops: int = 0


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
    in_flight: OpenOps = dataclasses.field(default_factory=OpenOps)   # (region, op_id) -> InFlight
    stats: dict = dataclasses.field(default_factory=dict)       # (name, kind) -> [n, total, max, bytes, flops]
    comms: CommTable = dataclasses.field(default_factory=CommTable)
    dropped: dict = dataclasses.field(default_factory=dict)     # region -> cumulative drops
    devices: dict = dataclasses.field(default_factory=dict)     # CUDA ordinal -> the tracer's DEVICE record (docs/gpu.md)
    hook_devices: dict = dataclasses.field(default_factory=dict)   # CUDA ordinal -> the hook's: a device launched on
    alive: bool = True
    links: object = None   # () -> [pb.LinkChannel]: the NCCL plugin's table (diag/agent/links.py)
    unfinished: probes.Unfinished | None = None   # the hook's oldest unfinished kernel probe

    def device_claim(self):
        """The DEVICE record naming the GPU this rank runs on, or None
        (docs/gpu.md, "Where the identity comes from"): the work's device is
        the truth, so the hook's launches decide. The tracer's first device
        (set_device, the first CUDA collective) wins where the hook launched
        there too, as the hook's record of it (the runtime's UUID and PCI
        address); a device the tracer named but no launch used yields to the
        hook's first; without hook records the tracer's first stands."""
        said = next(iter(self.devices.values()), None)
        if not self.hook_devices:
            return said
        if said is not None and said.comm_rank in self.hook_devices:
            return self.hook_devices[said.comm_rank]
        return next(iter(self.hook_devices.values()))


class NodeState:
    """Everything the agent knows about its node's ranks.

    It owns the regions (which worker of a rank a region's records belong
    to) and feeds the per-rank views, the perf window and the timeline ring,
    through one protocol (diag/records/feed.py): each gets only the records
    of the regions a rank's current worker owns."""

    def __init__(self, clock=time.monotonic_ns, perf: RankFeed | None = None,
                 is_alive=procs.is_alive, log=None, timeline: RankFeed | None = None):
        self.clock = clock
        self.perf = perf   # a diag.perf.window.PerfWindow, or None: no performance view
        self.timeline = timeline   # a diag.timeline.ring.TimelineRing; None: none, or switched off
        self._is_alive = is_alive
        self._log = log or (lambda message: None)
        self._kept_owner: set[tuple[int, int]] = set()   # (rank, pid) refused, said once
        self._said_bare: set[tuple[int, int]] = set()    # (rank, pid) reported bare, said once
        # Regions refused while their rank's owner lived: rank -> {region: header}.
        # A restarted worker whose predecessor was still exiting takes over
        # when the exit is seen (mark_exited).
        self._waiting: dict[int, dict[str, fmt.Header]] = {}
        self.ranks: dict[int, RankState] = {}
        self._region_rank: dict[str, tuple[int, int]] = {}   # region -> (rank, pid)
        self._region_producer: dict[str, int] = {}

    # -- regions ----------------------------------------------------------
    def add_region(self, region: str, header: fmt.Header) -> None:
        """A region appeared. A new pid for a known rank is a restarted worker,
        and its state starts afresh, only once the old pid has exited: a live
        owner keeps the rank (a child that inherited RANK is not the rank),
        and the agent says so once per pid."""
        self._region_rank[region] = (header.rank, header.pid)
        self._region_producer[region] = header.producer
        current = self.ranks.get(header.rank)
        if current is not None and (current.pid == header.pid
                                    or current.started_ns > header.start_mono_ns):
            return
        if current is not None and current.alive and self._is_alive(current.pid):
            if (header.rank, header.pid) not in self._kept_owner:
                self._kept_owner.add((header.rank, header.pid))
                self._log(f"rank {header.rank}: ignoring region {region} of pid {header.pid}: "
                          f"pid {current.pid} still owns the rank (a child process that "
                          f"inherited RANK?)")
            self._waiting.setdefault(header.rank, {})[region] = header
            return
        self.ranks[header.rank] = RankState(
            header.rank, header.local_rank, header.world_size, header.pid,
            header.start_mono_ns, header.start_mono_ns)
        # A restarted worker's window starts afresh; its timeline drops what was open.
        self._feed("start_rank", lambda view: view.start_rank(header))

    def remove_region(self, region: str) -> None:
        rank_pid = self._region_rank.pop(region, None)
        self._region_producer.pop(region, None)
        if rank_pid is not None:
            self._feed("remove_region", lambda view: view.remove_region(rank_pid[0], region))
        for waiting in self._waiting.values():
            waiting.pop(region, None)

    def mark_exited(self, pid: int) -> None:
        for state in list(self.ranks.values()):
            if state.pid != pid:
                continue
            state.alive = False
            state.in_flight.clear()
            waiting = self._waiting.pop(state.rank, {})
            for region, header in sorted(waiting.items(), key=lambda kv: kv[1].start_mono_ns):
                if self._is_alive(header.pid):
                    self.add_region(region, header)   # the restarted worker takes the rank

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
            self._feed("set_dropped", lambda view: view.set_dropped(state.rank, region, dropped))

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
            elif rec.event == fmt.EVENT_GROUP:
                state.comms.group(rec)
            elif rec.event == fmt.EVENT_DEVICE:
                said = state.hook_devices if producer == fmt.PRODUCER_HOOK else state.devices
                said.setdefault(rec.comm_rank, rec)
            elif rec.event == fmt.EVENT_PROBE:
                state.unfinished = probes.from_record(rec)
        if records:
            self._feed("apply", lambda view: view.apply(state.rank, region, producer, records))

    def _feed(self, what: str, call) -> None:
        """Hands one change to the per-rank views. The perf window's failure
        is the region's, as a bad record's is (the sampler skips the region);
        the timeline is an extra: a failing ring is switched off, in one
        line, and the hang path goes on."""
        if self.perf is not None:
            call(self.perf)
        if self.timeline is not None:
            try:
                call(self.timeline)
            except Exception as exc:
                self.timeline = None
                self._log(f"timeline switched off: {what} failed: {exc!r}")

    def _start(self, state, region, producer, rec) -> None:
        state.in_flight.start(region, rec.op_id, InFlight(
            rec.name, rec.kind, producer, rec.comm_id, rec.seq, rec.t_mono_ns, rec.bytes,
            rec.comm_rank, rec.comm_size, rec.flags, rec.flops))
        state.last_activity_ns = max(state.last_activity_ns, rec.t_mono_ns)
        state.last_op = rec.name
        if rec.kind in fmt.COMM_LANES:
            state.comms.start(producer, rec)

    def _end(self, state, region, rec) -> None:
        # Its lane's earlier ops end too: their ENDs were lost (diag/records/inflight.py).
        state.in_flight.end(region, rec)
        state.last_activity_ns = max(state.last_activity_ns, rec.t_mono_ns)
        # The flops field of a collective carries its reduce op and peer.
        flops = 0 if rec.kind in fmt.COMM_LANES else rec.flops
        self._stat(state, rec.name, rec.kind, 1, rec.duration_ns, rec.bytes, flops)
        if rec.kind not in fmt.COMM_LANES:
            if rec.kind == fmt.KIND_HOST_FUNC and rec.name == DEFAULT_STEP_NAME:
                state.comms.steps.ended(rec.t_mono_ns)
            return
        state.comms.end(self._region_producer.get(region, 0), rec)

    @staticmethod
    def _stat(state, name, kind, count, dur, nbytes, flops) -> None:
        s = state.stats.setdefault((name, kind), [0, 0, 0, 0, 0])
        s[0] += count
        s[1] += dur
        s[2] = max(s[2], dur)
        s[3] += nbytes
        s[4] += flops

    # -- reports ----------------------------------------------------------
    def perf_message(self, rank: int, totals: bool = True) -> pb.PerfRank | None:
        """The rank's performance window (None: no view, or the rank never
        seen), one series per op: the hook's communicators under their group's
        id, and a tracer call the hook also saw only once, from the hook
        (CommTable.series). The report and the Prometheus endpoint both."""
        if self.perf is None:
            return None
        state = self.ranks.get(rank)
        if state is None:
            return self.perf.message(rank, totals=totals)
        # The comm ops still in flight count as waiting (a hung rank waits);
        # a dead worker's are not in flight, they are lost.
        open_since: dict[int, int] = {}
        for op in state.in_flight.values() if state.alive else ():
            if op.kind in fmt.COMM_LANES:
                open_since[op.producer] = min(op.start_ns, open_since.get(op.producer, op.start_ns))
        return self.perf.message(rank, totals=totals, series=state.comms.series, open_since=open_since)

    def in_flight_op(self, rank: int) -> tuple[str, int, int, float] | None:
        """(name, kind, group id, age in s) of the rank's oldest collective, p2p
        or host-function call in flight, as the report's oldest_in_flight
        picks it; None: none, or the worker is gone. Kernels and GEMMs are
        left out: their names are not metric labels (docs/metrics.md)."""
        state = self.ranks.get(rank)
        if state is None or not state.alive or not state.in_flight:
            return None
        ops = [op for op in state.in_flight.values() if op.kind in IN_FLIGHT_KINDS]
        if not ops:
            return None
        unshadowed = [op for op in ops if not state.comms.shadowed(op.producer, op.comm_id)] or ops
        op = min(unshadowed, key=lambda o: o.start_ns)
        comm = state.comms.group_of(op.producer, op.comm_id) if op.kind in fmt.COMM_LANES else 0
        return op.name, op.kind, comm, max(0, self.clock() - op.start_ns) / 1e9

    def pid_of(self, rank: int) -> int | None:
        state = self.ranks.get(rank)
        return state.pid if state is not None and state.alive else None

    def report(self, with_perf: bool = True, now: int | None = None) -> list[pb.RankProgress]:
        """RankProgress for every rank, ages and idle times as of ``now``
        (the clock's); per-op stats are deltas since the last call.
        ``with_perf=False`` leaves the perf windows out (a collector that is
        behind asks for them less often: the window moves slowly)."""
        now = self.clock() if now is None else now
        out = []
        for rank in sorted(self.ranks):
            state = self.ranks[rank]
            try:
                out.append(self._rank_progress(state, now))
                window = self.perf_message(rank, totals=False) if with_perf else None
                if window is not None:
                    # the hook's communicators under their process group's id, as in CommProgress
                    for busy in window.comm_busy:   # two hook comms of one group: two entries (diag.perf.derive)
                        if not busy.all_comms:
                            busy.comm_id = state.comms.group_of(busy.producer, busy.comm_id)
                    out[-1].perf.CopyFrom(window)
            except (ValueError, TypeError, OverflowError) as exc:
                # Values a worker wrote that no message can carry (a garbage
                # record's duration overflowing a sum): this rank is reported
                # bare, and every other rank as usual.
                if out and out[-1].rank == rank:
                    out.pop()
                out.append(self._bare_progress(state, now, exc))
            state.stats = {}
        return out

    def _bare_progress(self, state: RankState, now: int, exc: Exception) -> pb.RankProgress:
        if (state.rank, state.pid) not in self._said_bare:
            self._said_bare.add((state.rank, state.pid))
            self._log(f"rank {state.rank} (pid {state.pid}): its records do not fit a report "
                      f"({exc}); only its liveness is reported")
        return pb.RankProgress(rank=state.rank, local_rank=state.local_rank,
                               world_size=state.world_size, pid=state.pid, alive=state.alive,
                               idle_ns=max(0, min(now - state.last_activity_ns, (1 << 63) - 1)))

    @staticmethod
    def _rank_progress(state: RankState, now: int) -> pb.RankProgress:
        msg = pb.RankProgress(
            rank=state.rank, local_rank=state.local_rank, world_size=state.world_size,
            pid=state.pid, alive=state.alive, dropped_records=sum(state.dropped.values()),
            idle_ns=max(0, now - state.last_activity_ns), last_op=state.last_op,
            # Always, short and only where the framework names its groups: the
            # culprit of a hang is often a rank in no op (a stall in user code).
            parallel_coords=state.comms.coords())
        stuck = False
        if state.in_flight:
            op = _oldest(state)
            age = max(0, now - op.start_ns)
            stuck = age >= FINGERPRINTS_AFTER_NS
            reduce_op, peer = fmt.unpack_coll_args(op.flops) if op.kind in fmt.COMM_LANES else (-1, -1)
            msg.oldest_in_flight.CopyFrom(pb.InFlightOp(
                name=op.name, kind=op.kind, producer=op.producer,
                comm_id=state.comms.group_of(op.producer, op.comm_id), seq=op.seq, age_ns=age,
                bytes=op.nbytes, comm_rank=op.comm_rank, comm_size=op.comm_size,
                dtype=fmt.dtype_of(op.flags), reduce_op=reduce_op, peer=peer))
        if state.unfinished is not None and state.alive:
            msg.unfinished_kernel.CopyFrom(probes.message(state.unfinished, now))
        for (name, kind), (n, total, mx, nbytes, flops) in sorted(state.stats.items()):
            msg.stats.add(name=name, kind=kind, count=n, total_ns=total, max_ns=mx,
                          bytes=nbytes, flops=flops)
        msg.comms.extend(state.comms.progress(with_fingerprints=stuck))
        if stuck and state.links is not None:   # docs/link.md: only while an op is stuck
            msg.links.extend(state.links())
        return msg


def _oldest(state: RankState) -> InFlight:
    """The oldest op in flight; a tracer op of a group the hook also covers
    only when nothing else is (the hook's op carries the group's true seq)."""
    ops = [op for op in state.in_flight.values()
           if not state.comms.shadowed(op.producer, op.comm_id)] or list(state.in_flight.values())
    return min(ops, key=lambda o: o.start_ns)
