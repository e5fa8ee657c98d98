"""The agent's timeline ring: the last N seconds of every local rank's spans.

The sampler hands it the same records it hands NodeState (no second reader
of the shared-memory rings; the hook and tracer are unchanged). Memory is
bounded twice per rank: by age and by count.

- Age: a rank keeps the spans that ended within ``window_ns`` of its own
  newest record, not of the wall clock, so a rank stuck for five minutes
  still holds the 30 s before it stopped (what a HANG event wants to show).
- Count: at most ``max_spans`` completed spans and ``max_in_flight`` open
  ops; past that the oldest span is dropped and counted (``dropped_spans``),
  and an op that starts while the in-flight table is full is not tracked.

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
from diag.timeline.api import (DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_SPANS, RankMeta,
                               RankSnapshot, Span)


@dataclasses.dataclass
class _Rank:
    meta: RankMeta
    spans: collections.deque = dataclasses.field(default_factory=collections.deque)
    in_flight: dict = dataclasses.field(default_factory=dict)  # (region, op_id) -> START record
    newest_ns: int = 0
    dropped_spans: int = 0
    dropped_records: dict = dataclasses.field(default_factory=dict)  # region -> cumulative


class TimelineRing:
    def __init__(self, window_ns: int, max_spans: int = DEFAULT_MAX_SPANS,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT):
        if window_ns <= 0 or max_spans <= 0 or max_in_flight <= 0:
            raise ValueError("timeline window and caps must be positive")
        self.window_ns = window_ns
        self.max_spans = max_spans
        self.max_in_flight = max_in_flight
        self._ranks: dict[int, _Rank] = {}
        self._regions: dict[str, tuple[int, int]] = {}   # region -> (rank, producer)

    # -- regions ----------------------------------------------------------
    def add_region(self, region: str, header: fmt.Header) -> None:
        self._regions[region] = (header.rank, header.producer)
        meta = RankMeta(header.rank, header.local_rank, header.world_size, header.pid)
        state = self._ranks.get(header.rank)
        if state is None:
            self._ranks[header.rank] = _Rank(meta)
        elif state.meta.pid != header.pid:
            # A restarted worker: its old spans stay until they age out, but
            # its old in-flight ops will never end.
            state.meta = meta
            state.in_flight.clear()

    def remove_region(self, region: str) -> None:
        owner = self._regions.pop(region, None)
        if owner is not None and owner[0] in self._ranks:
            state = self._ranks[owner[0]]
            for key in [k for k in state.in_flight if k[0] == region]:
                del state.in_flight[key]

    def set_dropped(self, region: str, dropped: int) -> None:
        owner = self._regions.get(region)
        if owner is not None and owner[0] in self._ranks:
            self._ranks[owner[0]].dropped_records[region] = dropped

    # -- records ----------------------------------------------------------
    def apply(self, region: str, records) -> None:
        owner = self._regions.get(region)
        if owner is None:
            return
        state, producer = self._ranks[owner[0]], owner[1]
        in_flight, cap = state.in_flight, self.max_in_flight
        untimed_dropped = producer == fmt.PRODUCER_HOOK
        # The hot loop of the timeline (every record of the node): START keeps
        # the reader's record itself; a Span is built only for what is kept.
        for rec in records:
            event = rec.event
            if event == fmt.EVENT_START:
                if len(in_flight) < cap:
                    in_flight[(region, rec.op_id)] = rec
            elif event == fmt.EVENT_END:
                started = in_flight.pop((region, rec.op_id), None)
                if rec.t_mono_ns > state.newest_ns:
                    state.newest_ns = rec.t_mono_ns
                if rec.seq and in_flight:
                    self._drop_stale(in_flight, region, rec)
                if untimed_dropped and not rec.flags & fmt.FLAG_DEVICE_TIMED:
                    continue
                self._end(state, producer, rec, started)

    @staticmethod
    def _drop_stale(in_flight: dict, region: str, rec) -> None:
        # Ops of one lane of a communicator end in order (docs/records.md):
        # earlier seqs of that lane still listed lost their END to a full
        # ring. A record's lane is its kind: a p2p END says nothing about a
        # collective in flight, nor the reverse (as NodeState._end).
        stale = [k for k, op in in_flight.items()
                 if k[0] == region and op.comm_id == rec.comm_id and op.kind == rec.kind
                 and 0 < op.seq < rec.seq]
        for key in stale:
            del in_flight[key]

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
            producers = {region: p for region, (_, p) in self._regions.items()}
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
