"""Per-rank sliding window of op figures, fed with progress records by the agent.

Memory per rank is bounded whatever the job length: ``slots`` time slots of
the window, each with at most ``max_ops`` op keys, each with a histogram of at
most ~170 log buckets (a quarter octave each, so a percentile is within 12.5%).
No threads, no I/O; the agent calls it under its state lock.

Time in communication is the union of the collective/p2p calls' intervals
(``[end - duration, end]`` of each timed END), per communicator and across
all of a producer's communicators: ops in flight at once count once.
"""

from __future__ import annotations

import collections
import time

from diag.pb import collector_pb2 as pb
from diag.perf.api import DEFAULT_STEP_NAME, DEFAULT_WINDOW_S, MAX_OPS_PER_RANK, OTHER_OP
from diag.records import format as fmt

TIMED_KINDS = (fmt.KIND_GEMM, fmt.KIND_COLLECTIVE, fmt.KIND_P2P, fmt.KIND_HOST_FUNC)
# Accumulator fields (a list, for speed in the per-record path).
COUNT, TIMED, TIMED_NS, BYTES, TIMED_BYTES, FLOPS, TIMED_FLOPS, MAX_NS, COMM_SIZE = range(9)


def bucket_of(ns: int) -> int:
    """Quarter-octave bucket: the octave, then the next two bits."""
    length = ns.bit_length()
    if length < 3:
        return max(ns, 0)
    return (length - 1) * 4 + ((ns >> (length - 3)) & 3)


def bucket_value(bucket: int) -> int:
    """The middle of a bucket, in ns."""
    if bucket < 4:
        return bucket
    octave, quarter = divmod(bucket, 4)
    low = (4 + quarter) << (octave - 2)
    return low + (1 << (octave - 2)) // 2


def percentile(hist: dict, q: float) -> int:
    total = sum(hist.values())
    if total == 0:
        return 0
    want, seen = q * total, 0
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen >= want:
            return bucket_value(bucket)
    return bucket_value(max(hist))


class _Slot:
    __slots__ = ("index", "ops", "hists", "launches", "steps", "step_ns", "busy_comm", "busy_all")

    def __init__(self, index: int):
        self.index = index
        self.ops: dict = {}      # key -> accumulator list
        self.hists: dict = {}    # key -> {bucket: count}
        self.launches = 0
        self.steps = 0
        self.step_ns = 0
        self.busy_comm: dict = {}   # (producer, comm_id) -> ns newly covered by its ops
        self.busy_all: dict = {}    # producer -> ns newly covered by any of its comm ops


class _Rank:
    def __init__(self):
        # The window starts at the rank's first recorded op, not at its
        # interpreter's start: imports and rendezvous would dilute the rates.
        self.first_ns = None
        self.slots: collections.deque = collections.deque()
        self.totals: dict = {}   # key -> [count, timed, timed_ns, bytes, flops]
        self.launches_total = 0
        self.steps_total = 0
        self.last_step_t = 0
        self.last_step_ns = 0
        # How far the union of comm ops' intervals reaches, per
        # (producer, comm_id) and per producer across its communicators.
        self.covered_comm: dict = {}
        self.covered_all: dict = {}


class PerfWindow:
    def __init__(self, window_s: float = DEFAULT_WINDOW_S, step_name: str = DEFAULT_STEP_NAME,
                 clock=time.monotonic_ns, slots: int = 12, max_ops: int = MAX_OPS_PER_RANK):
        self.window_ns = int(window_s * 1e9)
        self.slot_ns = max(1, self.window_ns // slots)
        self.step_name = step_name
        self.clock = clock
        self.max_ops = max_ops
        self.ranks: dict[int, _Rank] = {}

    def start(self, rank: int) -> None:
        """A new worker for ``rank``: a fresh window."""
        self.ranks[rank] = _Rank()

    # -- diag.records.feed.RankFeed: how the agent's NodeState feeds it --
    def start_rank(self, header: fmt.Header) -> None:
        self.start(header.rank)

    def apply(self, rank: int, region: str, producer: int, records) -> None:
        self.observe(rank, producer, records)

    def set_dropped(self, rank: int, region: str, dropped: int) -> None:
        pass   # the window counts what was recorded; drops are in the rank's report

    def remove_region(self, rank: int, region: str) -> None:
        pass   # nothing open is kept: only ENDs and COUNTs are counted

    def _slot(self, state: _Rank, now: int) -> _Slot:
        index = now // self.slot_ns
        if not state.slots or state.slots[-1].index != index:
            state.slots.append(_Slot(index))
            oldest = index - self.window_ns // self.slot_ns
            while state.slots and state.slots[0].index <= oldest:
                state.slots.popleft()
        return state.slots[-1]

    def launches_total(self, rank: int) -> int:
        """Kernel launches the hook counted for ``rank`` since its worker started."""
        state = self.ranks.get(rank)
        return state.launches_total if state is not None else 0

    def observe(self, rank: int, producer: int, records) -> None:
        """Account END and COUNT records of one region of ``rank``."""
        now = self.clock()
        state = self.ranks.get(rank)
        if state is None:
            state = self.ranks[rank] = _Rank()
        if state.first_ns is None:
            first = records[0]
            state.first_ns = min(now, first.t_mono_ns - first.duration_ns) if first.t_mono_ns else now
        slot = self._slot(state, now)
        for rec in records:
            if rec.event == fmt.EVENT_END and rec.kind in TIMED_KINDS:
                self._end(state, slot, producer, rec)
            elif rec.event == fmt.EVENT_COUNT:
                if rec.kind == fmt.KIND_KERNEL:
                    slot.launches += rec.count
                    state.launches_total += rec.count
                elif rec.kind in TIMED_KINDS:   # calls captured into a CUDA graph: counted only
                    self._account(state, slot, producer, rec, rec.count, 0)

    def _end(self, state: _Rank, slot: _Slot, producer: int, rec) -> None:
        timed = rec.duration_ns if rec.duration_ns > 0 and not rec.flags & fmt.FLAG_FAILED else 0
        self._account(state, slot, producer, rec, 1, timed)
        if timed and rec.kind in fmt.COMM_LANES:
            self._cover(state, slot, producer, rec.comm_id, rec.t_mono_ns - timed, rec.t_mono_ns)
        if rec.kind == fmt.KIND_HOST_FUNC and rec.name == self.step_name:
            # steps_total counts calls; the window's steps count intervals,
            # which its mean step time divides (the first call starts none).
            state.steps_total += 1
            if state.last_step_t and rec.t_mono_ns > state.last_step_t:
                interval = rec.t_mono_ns - state.last_step_t
                slot.steps += 1
                slot.step_ns += interval
                state.last_step_ns = interval
            state.last_step_t = rec.t_mono_ns

    def _cover(self, state: _Rank, slot: _Slot, producer: int, comm_id: int, start: int, end: int) -> None:
        """Add what [start, end] covers beyond the union so far.

        Only the union's reach is kept, not its intervals (constant memory
        and time per END): exact while ENDs come in end order. They come
        roughly so (a lane's ops end in order, a p2p op as it completes, each
        producer's ring is read in order). An op whose END comes after that
        of a later-ending op counts nothing before the reach, so the union
        errs low by the part of that op that nothing counted covered, at most
        its duration. An op whose END the tracer held until an elder's lies
        inside the elder's interval and loses nothing."""
        until = state.covered_all.get(producer, 0)
        slot.busy_all[producer] = slot.busy_all.get(producer, 0) + max(0, end - max(start, until))
        state.covered_all[producer] = max(until, end)
        key = (producer, comm_id)
        until = state.covered_comm.get(key)
        if until is None:
            if len(state.covered_comm) >= self.max_ops:
                return   # bounded memory: beyond that many communicators, the rank-wide union only
            until = 0
        slot.busy_comm[key] = slot.busy_comm.get(key, 0) + max(0, end - max(start, until))
        state.covered_comm[key] = max(until, end)

    def _account(self, state: _Rank, slot: _Slot, producer: int, rec, count: int, timed: int):
        key = (rec.name, rec.kind, rec.comm_id, producer)
        total = state.totals.get(key)
        if total is None:
            if len(state.totals) >= self.max_ops:
                key = (OTHER_OP, rec.kind, 0, producer)
                total = state.totals.get(key)
            if total is None:
                total = state.totals[key] = [0, 0, 0, 0, 0]
        acc = slot.ops.get(key)
        if acc is None:
            acc = slot.ops[key] = [0, 0, 0, 0, 0, 0, 0, 0, rec.comm_size]
        # A collective/p2p record's flops field carries its reduce op and peer
        # (docs/records.md), not FLOPs.
        rec_flops = 0 if rec.kind in fmt.COMM_LANES else rec.flops
        nbytes, flops = rec.bytes * count, rec_flops * count
        acc[COUNT] += count
        acc[BYTES] += nbytes
        acc[FLOPS] += flops
        acc[COMM_SIZE] = rec.comm_size or acc[COMM_SIZE]
        total[0] += count
        total[3] += nbytes
        total[4] += flops
        if timed:
            acc[TIMED] += 1
            acc[TIMED_NS] += timed
            acc[TIMED_BYTES] += rec.bytes
            acc[TIMED_FLOPS] += rec_flops
            acc[MAX_NS] = max(acc[MAX_NS], timed)
            total[1] += 1
            total[2] += timed
            hist = slot.hists.get(key)
            if hist is None:
                hist = slot.hists[key] = {}
            bucket = bucket_of(timed)
            hist[bucket] = hist.get(bucket, 0) + 1

    def message(self, rank: int, totals: bool = True, series=None, open_since=None) -> pb.PerfRank | None:
        """The rank's window as it stands now (None if never seen). ``totals``:
        with the cumulative counters, which only the agent's Prometheus
        endpoint needs (the reports to the collector leave them out).

        ``series(producer, kind, comm_id)``: the comm id an op is reported
        under, or None to leave it out; ops that come to share a key are
        merged. The agent passes one that makes one op one series: the hook's
        communicators under their process group's id, and the tracer's calls
        of a group the hook also covers left out (the hook's are the same
        calls, device-timed). None: every key as recorded.

        ``open_since``: {producer: start (monotonic ns) of its oldest comm op
        still in flight}. The window counts only ENDs, so a rank hung in a
        collective would read as waiting less and less; the span from that
        start (or from the union's reach, if later) to now is sent as the
        producer's ``open_ns``."""
        state = self.ranks.get(rank)
        if state is None or state.first_ns is None:
            return None
        now = self.clock()
        self._slot(state, now)   # drops the slots that left the window
        ops: dict = {}
        hists: dict = {}
        busy_comm: dict = {}
        busy_all: dict = {}
        # The span the kept slots cover (between window - slot and window), so
        # rates divide by the time their counts came from.
        since = max(state.first_ns, state.slots[0].index * self.slot_ns)
        msg = pb.PerfRank(window_s=max(0, now - since) / 1e9,
                          step_name=self.step_name, last_step_ns=state.last_step_ns,
                          launches_total=state.launches_total, steps_total=state.steps_total)
        for slot in state.slots:
            msg.launches += slot.launches
            msg.steps += slot.steps
            msg.step_ns += slot.step_ns
            for key, ns in slot.busy_comm.items():
                busy_comm[key] = busy_comm.get(key, 0) + ns
            for producer, ns in slot.busy_all.items():
                busy_all[producer] = busy_all.get(producer, 0) + ns
            for key, acc in slot.ops.items():
                into = ops.get(key)
                if into is None:
                    ops[key] = list(acc)
                    continue
                for i in range(MAX_NS):
                    into[i] += acc[i]
                into[MAX_NS] = max(into[MAX_NS], acc[MAX_NS])
                into[COMM_SIZE] = acc[COMM_SIZE] or into[COMM_SIZE]
            for key, hist in slot.hists.items():
                merged = hists.setdefault(key, {})
                for bucket, n in hist.items():
                    merged[bucket] = merged.get(bucket, 0) + n
        if series is not None:
            ops, hists = _relabel(ops, series, _merge_acc), _relabel(hists, series, _merge_hist)
        for (name, kind, comm_id, producer), acc in sorted(ops.items()):
            hist = hists.get((name, kind, comm_id, producer), {})
            msg.ops.add(name=name, kind=kind, producer=producer, comm_id=comm_id,
                        comm_size=acc[COMM_SIZE], count=acc[COUNT], timed_count=acc[TIMED],
                        timed_ns=acc[TIMED_NS], bytes=acc[BYTES], timed_bytes=acc[TIMED_BYTES],
                        flops=acc[FLOPS], timed_flops=acc[TIMED_FLOPS],
                        p50_ns=min(percentile(hist, 0.5), acc[MAX_NS]),
                        p99_ns=min(percentile(hist, 0.99), acc[MAX_NS]), max_ns=acc[MAX_NS])
        open_ns = {producer: max(0, now - max(start, state.covered_all.get(producer, 0), since))
                   for producer, start in (open_since or {}).items()}
        for producer in sorted(set(busy_all) | {p for p, ns in open_ns.items() if ns}):
            msg.comm_busy.add(producer=producer, all_comms=True, busy_ns=busy_all.get(producer, 0),
                              open_ns=open_ns.get(producer, 0))
        for (producer, comm_id), ns in sorted(busy_comm.items()):
            msg.comm_busy.add(producer=producer, comm_id=comm_id, busy_ns=ns)
        kept = state.totals if series is None else _relabel(state.totals, series, _merge_total)
        for (name, kind, comm_id, _producer), t in sorted(kept.items() if totals else ()):
            msg.totals.add(name=name, kind=kind, comm_id=comm_id, count=t[0], timed_count=t[1],
                           timed_ns=t[2], bytes=t[3], flops=t[4])
        return msg


def _relabel(items: dict, series, merge) -> dict:
    """``items`` keyed (name, kind, comm_id, producer), with collective and p2p
    keys renamed or dropped by ``series``; values of keys that meet merged."""
    out: dict = {}
    for (name, kind, comm_id, producer), value in items.items():
        if kind in fmt.COMM_LANES:
            comm_id = series(producer, kind, comm_id)
            if comm_id is None:
                continue
        key = (name, kind, comm_id, producer)
        out[key] = merge(out[key], value) if key in out else (
            dict(value) if isinstance(value, dict) else list(value))
    return out


def _merge_acc(into: list, acc: list) -> list:
    for i in range(MAX_NS):
        into[i] += acc[i]
    into[MAX_NS] = max(into[MAX_NS], acc[MAX_NS])
    into[COMM_SIZE] = into[COMM_SIZE] or acc[COMM_SIZE]
    return into


def _merge_hist(into: dict, hist: dict) -> dict:
    for bucket, n in hist.items():
        into[bucket] = into.get(bucket, 0) + n
    return into


def _merge_total(into: list, total: list) -> list:
    return [a + b for a, b in zip(into, total)]
