"""Contracts of the timeline: what the ring holds, what the writer needs.

The agent's ring (``ring.py``) keeps :class:`Span` tuples per rank; a snapshot
is turned into a ``TimelineUpload`` proto on the agent's host, where the
monotonic clock can still be read. The collector merges uploads into one
Trace Event Format document (``trace.py``).
"""

from __future__ import annotations

import dataclasses
import typing

from diag.common import dumpnames

# The window's default is --timeline-window's (diag.common.options.TIMELINE_WINDOW).
# Per rank, completed spans kept at most (oldest dropped first, counted):
# ~20 k spans is ~1 min of a GPT-2 step's device-timed GEMMs and NCCL calls
# at 1 in 8 sampling; about 150 bytes each (tests/timeline/test_ring.py).
DEFAULT_MAX_SPANS = 20_000
DEFAULT_MAX_IN_FLIGHT = 4096
TIMELINE_FILE = dumpnames.TIMELINE_JSON
# How long the collector waits for the agents' uploads: they see a command
# at their next report (about 1 s), then snapshot and upload in well under 1 s.
DEFAULT_WAIT_S = 10.0


class Span(typing.NamedTuple):
    """One op of one rank, in the agent's CLOCK_MONOTONIC nanoseconds.

    A NamedTuple, not a dataclass: the ring holds tens of thousands per rank.
    """

    start_ns: int
    end_ns: int
    name: str
    kind: int
    producer: int
    flags: int       # the record's flags (device-timed, failed)
    comm_id: int
    seq: int
    nbytes: int
    flops: int


@dataclasses.dataclass
class RankMeta:
    rank: int
    local_rank: int
    world_size: int
    pid: int


@dataclasses.dataclass
class RankSnapshot:
    """What the ring gives for one rank: completed spans (end order) and ops
    still in flight (``end_ns`` = the snapshot time)."""

    meta: RankMeta
    spans: list[Span]
    in_flight: list[Span]
    dropped_spans: int
    dropped_records: int = 0


class TimelineError(ValueError):
    """Bad input to the timeline command or writer; one line with the fix."""
