"""The agent's timeline ring: the last N seconds of every local rank's spans.

NodeState hands it the records of the regions it owns (diag/records/feed.py):
no second reader of the shared-memory rings, no second table of regions.
Memory is bounded twice per rank: by age and by count.

- Age: a rank keeps the spans that ended within ``window_ns`` of its own
  newest record, not of the wall clock, so a rank stuck for five minutes
  still holds the 30 s before it stopped (what a HANG event wants to show).
- Count: at most ``max_spans`` completed spans and ``max_in_flight`` open
  ops; past that the oldest span is dropped and counted (``dropped_spans``),
  and an op that starts while the in-flight table is full is not tracked.
  An END also ends its lane's earlier ops, whose ENDs a full ring dropped
  (diag/records/inflight.py).

What is kept: tracer ops (CPU side) and hook ops whose END is device-timed
(GPU side), plus every op in flight. Hook ops that were not device-timed
(7 in 8 by default) carry no duration worth drawing and are not kept.

Not thread-safe: the agent calls it under its lock, as it does NodeState.
"""

from __future__ import annotations

import collections
import dataclasses
import sys

from diag.records import format as fmt
from diag.records.inflight import OpenOps
from diag.timeline.api import (DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_SPANS, RankMeta,
                               RankSnapshot, Span)


@dataclasses.dataclass
class _Rank:
    meta: RankMeta
    in_flight: OpenOps   # (region, op_id) -> START record
    spans: collections.deque = dataclasses.field(default_factory=collections.deque)
    producers: dict = dataclasses.field(default_factory=dict)  # region -> producer, for open ops
    newest_ns: int = 0
    dropped_spans: int = 0
    dropped_records: dict = dataclasses.field(default_factory=dict)  # region -> cumulative


class TimelineRing:
    """A :class:`diag.records.feed.RankFeed`: the agent's NodeState owns the
    regions and hands it each rank's records (a child that inherited RANK
    takes over no rank's timeline, as it takes over no rank's progress)."""

    def __init__(self, window_ns: int, max_spans: int = DEFAULT_MAX_SPANS,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT):
        if window_ns <= 0 or max_spans <= 0 or max_in_flight <= 0:
            raise ValueError("timeline window and caps must be positive")
        self.window_ns = window_ns
        self.max_spans = max_spans
        self.max_in_flight = max_in_flight
        self._ranks: dict[int, _Rank] = {}

    # -- RankFeed ---------------------------------------------------------
    def start_rank(self, header: fmt.Header) -> None:
        meta = RankMeta(header.rank, header.local_rank, header.world_size, header.pid)
        state = self._ranks.get(header.rank)
        if state is None:
            self._ranks[header.rank] = _Rank(meta, OpenOps(self.max_in_flight))
        else:
            # A restarted worker: its old spans stay until they age out, but
            # its old in-flight ops will never end.
            state.meta = meta
            state.in_flight.clear()

    def remove_region(self, rank: int, region: str) -> None:
        state = self._ranks.get(rank)
        if state is not None:
            state.in_flight.forget_region(region)
            state.producers.pop(region, None)

    def set_dropped(self, rank: int, region: str, dropped: int) -> None:
        state = self._ranks.get(rank)
        if state is not None:
            state.dropped_records[region] = dropped

    def apply(self, rank: int, region: str, producer: int, records) -> None:
        state = self._ranks.get(rank)
        if state is None:
            return
        state.producers[region] = producer
        in_flight = state.in_flight
        untimed_dropped = producer == fmt.PRODUCER_HOOK
        # The hot loop of the timeline (every record of the node): START keeps
        # the reader's record itself; a Span is built only for what is kept.
        for rec in records:
            event = rec.event
            if event == fmt.EVENT_START:
                in_flight.start(region, rec.op_id, rec)   # not tracked while the table is full
            elif event == fmt.EVENT_END:
                started = in_flight.end(region, rec)   # and the lane's earlier ops (lost ENDs)
                if rec.t_mono_ns > state.newest_ns:
                    state.newest_ns = rec.t_mono_ns
                if untimed_dropped and not rec.flags & fmt.FLAG_DEVICE_TIMED:
                    continue
                self._end(state, producer, rec, started)

    def _end(self, state: _Rank, producer: int, rec, started) -> None:
        end = rec.t_mono_ns
        if rec.duration_ns:
            # The recorded duration is the truth (device time for the hook;
            # the tracer's own measure): the span ends at END and lasts that.
            start = end - rec.duration_ns
        elif started is not None:
            start = started.t_mono_ns
        else:
            start = end
        self._keep(state, _span(rec, producer, start, end))

    def _keep(self, state: _Rank, span: Span) -> None:
        spans = state.spans
        horizon = state.newest_ns - self.window_ns
        while spans and spans[0].end_ns < horizon:
            spans.popleft()
        if len(spans) >= self.max_spans:
            spans.popleft()
            state.dropped_spans += 1
        spans.append(span)

    # -- snapshots --------------------------------------------------------
    def snapshot(self, now_ns: int, last_ns: int = 0) -> list[RankSnapshot]:
        """Every rank's spans that end within ``last_ns`` of ``now_ns`` (0: all
        the ring holds), and its in-flight ops drawn up to ``now_ns``."""
        out = []
        for rank in sorted(self._ranks):
            state = self._ranks[rank]
            horizon = state.newest_ns - self.window_ns
            if last_ns:
                horizon = max(horizon, now_ns - last_ns)
            spans = [s for s in state.spans if s.end_ns >= horizon]
            producers = state.producers
            open_ops = sorted((_span(rec, producers.get(region, 0), rec.t_mono_ns,
                                     max(now_ns, rec.t_mono_ns))
                               for (region, _), rec in state.in_flight.items()),
                              key=lambda s: s.start_ns)
            out.append(RankSnapshot(dataclasses.replace(state.meta), spans, open_ops,
                                    state.dropped_spans, sum(state.dropped_records.values())))
        return out

    def __len__(self) -> int:
        return sum(len(s.spans) for s in self._ranks.values())


_NAMES: dict[str, str] = {}


def _span(rec, producer: int, start: int, end: int) -> Span:
    # One string object per op name, shared by every span of that name.
    name = _NAMES.get(rec.name)
    if name is None:
        name = _NAMES.setdefault(rec.name, sys.intern(rec.name)) if len(_NAMES) < 65536 else rec.name
    return Span(start, end, name, rec.kind, producer, rec.flags & 0xFF, rec.comm_id, rec.seq,
                rec.bytes, rec.flops)
