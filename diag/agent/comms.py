"""Per-rank communicator lanes, op fingerprints and process-group identity.

A communicator has two lanes, collectives and p2p, each with its own seq
(docs/records.md). Per lane the agent keeps the last seqs started and
completed and the fingerprints of its last ``FINGERPRINT_DEPTH`` ops, so the
collector can find where the members of a hung group stopped agreeing. The
work is the agent's, once per record; nothing is added to the producers'
per-call cost.

Identity: the tracer names each process group it sees with an EVENT_GROUP
record (its group id and display name). The hook knows NCCL communicators
only by a hash of their unique id. The agent ties the two when a hook
collective starts inside a tracer collective of the same name and size on
the same rank (the Python call that issued it), then reports the hook's
lanes under the group id and name. p2p ops tie as one family, and a hook
communicator of two ranks may tie to a larger group: torch gives each pair
of peers its own NCCL communicator. A lane both producers count is reported
once, from the hook, which sees every call (the tracer only the Python ones).
The tracer does not number p2p ops (seq 0): its p2p lane has no seqs or
fingerprints, but it still reports the group, so a rank hung in a send names
its group as one hung in a collective does.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses

from diag.common import parallel
from diag.pb import collector_pb2 as pb
from diag.records import format as fmt

FINGERPRINT_DEPTH = 64
RECENT_SPANS = 16     # tracer comm ops remembered to tie hook communicators to groups

NCCL_TO_TORCH, torch_name = fmt.NCCL_TO_TORCH, fmt.torch_name
# Tracer names that issue the NCCL call of the same torch name.
_TORCH_FAMILY = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
                 "barrier": "all_reduce"}
P2P_FAMILY = "p2p"   # send, recv, isend, irecv, batch_isend_irecv; ncclSend, ncclRecv
P2P_PAIR = 2         # the size of torch's per-pair p2p communicator


@dataclasses.dataclass
class Lane:
    """One lane of one communicator as seen by one producer of one rank."""
    started: int = 0
    completed: int = 0
    size: int = 0
    comm_rank: int = -1
    recent: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=FINGERPRINT_DEPTH))
    # p2p: (send or recv, peer) -> ops so far, to number each (Fingerprint.nth)
    paired: dict = dataclasses.field(default_factory=dict)

    def start(self, rec) -> None:
        self.size, self.comm_rank = rec.comm_size, rec.comm_rank
        if not rec.seq:   # an unnumbered op (the tracer's p2p): no seq, no fingerprint
            return
        self.started = max(self.started, rec.seq)
        reduce_op, peer = fmt.unpack_coll_args(rec.flops)
        fp = pb.Fingerprint(name=rec.name, bytes=rec.bytes, dtype=fmt.dtype_of(rec.flags),
                            reduce_op=reduce_op, peer=peer)
        if rec.kind == fmt.KIND_P2P:
            key = (torch_name(rec.name), peer)
            fp.nth = self.paired[key] = self.paired.get(key, 0) + 1
        self.recent.append((rec.seq, fp, rec.t_mono_ns))

    def window(self, out: pb.FingerprintWindow, steps=None, times: pb.StepTimes | None = None) -> None:
        """Fill ``out`` with the consecutive tail of the recent ops (a START
        lost to a full ring breaks the run; older ops are then left out), and
        ``times`` with the step each started in (``steps``: a :class:`Steps`)
        and when."""
        ops = list(self.recent)
        start = len(ops) - 1
        while start > 0 and ops[start - 1][0] == ops[start][0] - 1:
            start -= 1
        if ops:
            out.first_seq = ops[start][0]
            out.ops.extend(fp for _, fp, _ in ops[start:])
            if steps is not None and times is not None:
                for _, _, t in ops[start:]:
                    step, into = steps.at(t)
                    times.step.append(step)
                    times.into_step_ns.append(into)
                    times.start_ns.append(t)

    def end(self, rec) -> None:
        """An op of the lane ended. It started too: a START a full ring
        dropped must not leave ``started`` behind (or at 0 where every START
        of the lane was dropped), below the seq the rank has done."""
        if self.comm_rank < 0 or not self.size:
            self.size, self.comm_rank = rec.comm_size, rec.comm_rank
        self.completed = max(self.completed, rec.seq)
        self.started = max(self.started, rec.seq)


class Steps:
    """When the rank's optimizer steps ended, to tell which step an op started in.

    Said by time, not by the order records are read in: the hook's ops come
    from another ring than the tracer's step records, read in other batches.
    """

    def __init__(self, depth: int = FINGERPRINT_DEPTH) -> None:
        self.total = 0
        self._ends: collections.deque = collections.deque(maxlen=depth)

    def ended(self, t_mono_ns: int) -> None:
        self.total += 1
        self._ends.append(t_mono_ns)

    def at(self, t_mono_ns: int) -> tuple[int, int]:
        """(steps finished before ``t_mono_ns``, the oldest remembered a floor;
        ns since the last of them ended, 0 if none is remembered)."""
        ends = self._ends
        i = bisect.bisect_right(ends, t_mono_ns)
        return self.total - len(ends) + i, (t_mono_ns - ends[i - 1]) if i else 0


class CommTable:
    """Lanes per (producer, comm id, lane kind), group names and hook aliases."""

    def __init__(self) -> None:
        self.steps = Steps()
        self.lanes: dict[tuple[int, int, int], Lane] = {}
        self.names: dict[int, str] = {}       # group id -> display name (tracer)
        self.places: dict[str, int] = {}      # group name -> this rank's index in it
        self._coords: str | None = ""
        self.alias: dict[int, int] = {}       # hook comm id -> group id
        self._spans: collections.deque = collections.deque(maxlen=RECENT_SPANS)   # tracer ops
        self._unmatched: dict[int, tuple] = {}   # hook comm -> its latest untied start

    def group(self, rec) -> None:
        self.names[rec.comm_id] = rec.name
        self.places[rec.name] = rec.comm_rank
        self._coords = None

    def coords(self) -> str:
        """The rank's parallel coordinates, from its named groups (worked out
        again only when a group is named: every report carries them)."""
        if self._coords is None:
            self._coords = parallel.coords(self.places)
        return self._coords

    def start(self, producer: int, rec) -> None:
        lane = self.lanes.setdefault((producer, rec.comm_id, rec.kind), Lane())
        lane.start(rec)
        if producer == fmt.PRODUCER_PYTHON:
            self._spans.append([rec.op_id, rec.comm_id, _family(rec), rec.comm_size,
                                rec.t_mono_ns, None])
            if self._unmatched:
                self._retry(rec.t_mono_ns)
        elif producer == fmt.PRODUCER_HOOK and rec.comm_id not in self.alias:
            entry = (_family(rec), rec.comm_size, rec.t_mono_ns)
            if not self._tie(rec.comm_id, *entry) and (rec.comm_id in self._unmatched
                                                      or len(self._unmatched) < RECENT_SPANS):
                self._unmatched[rec.comm_id] = entry   # its tracer START may be read later

    def end(self, producer: int, rec) -> None:
        self.lanes.setdefault((producer, rec.comm_id, rec.kind), Lane()).end(rec)
        if producer == fmt.PRODUCER_PYTHON:
            for span in self._spans:
                if span[0] == rec.op_id:
                    span[5] = rec.t_mono_ns

    def _tie(self, comm: int, family: str, size: int, t: int) -> bool:
        """Tie a hook comm to the tracer op whose span holds its start: that
        Python call issued it. An ambiguous match (two groups) ties nothing.
        At most RECENT_SPANS checks per hook START of an untied comm."""
        pair = family == P2P_FAMILY and size == P2P_PAIR
        hits = {s[1] for s in self._spans if s[2] == family and (s[3] == size or pair)
                and s[4] <= t and (s[5] is None or t <= s[5])}
        if len(hits) == 1:
            self.alias[comm] = hits.pop()
            self._unmatched.pop(comm, None)
            return True
        return False

    def _retry(self, now: int) -> None:
        """Hook starts that waited for their tracer START (another region, read
        later). One older than a second before this tracer op cannot be in it."""
        for comm, entry in list(self._unmatched.items()):
            if entry[2] < now - 1_000_000_000:
                del self._unmatched[comm]
            else:
                self._tie(comm, *entry)

    def group_of(self, producer: int, comm_id: int) -> int:
        """The id a producer's comm id is reported under."""
        return self.alias.get(comm_id, comm_id) if producer == fmt.PRODUCER_HOOK else comm_id

    def shadowed(self, producer: int, comm_id: int) -> bool:
        """A tracer lane of a group the hook also covers: the hook's counts win."""
        return producer == fmt.PRODUCER_PYTHON and comm_id in self.alias.values()

    def series(self, producer: int, kind: int, comm_id: int) -> int | None:
        """The comm id a collective/p2p op's performance series is reported
        under (diag.perf.window.PerfWindow.message): one op, one series. The
        hook's under its group's id; a tracer op of a group the hook also
        covers not at all (None): the hook's are the same calls."""
        if self.shadowed(producer, comm_id):
            return None
        return self.group_of(producer, comm_id)

    def progress(self, with_fingerprints: bool) -> list[pb.CommProgress]:
        """One CommProgress per (group, lane). Where two hook communicators
        tie to one group (torch's p2p communicators beside its main one), the
        lane that went further is the group's."""
        chosen: dict[tuple[int, int], tuple[int, Lane]] = {}
        for (producer, comm_id, kind), lane in sorted(self.lanes.items()):
            if self.shadowed(producer, comm_id):
                continue
            key = (self.group_of(producer, comm_id), kind)
            if key not in chosen or lane.started > chosen[key][1].started:
                chosen[key] = (producer, lane)
        out = []
        for (group, kind), (_, lane) in sorted(chosen.items(), key=lambda kv: kv[0]):
            msg = pb.CommProgress(comm_id=group, last_started_seq=lane.started,
                                  last_completed_seq=lane.completed, comm_size=lane.size, lane=kind,
                                  group_name=self.names.get(group, ""), comm_rank=lane.comm_rank)
            if with_fingerprints and lane.recent:
                lane.window(msg.recent, self.steps, msg.recent_steps)
            out.append(msg)
        return out


def _family(rec) -> str:
    if rec.kind == fmt.KIND_P2P:
        return P2P_FAMILY
    name = torch_name(rec.name)
    return _TORCH_FAMILY.get(name, name)
