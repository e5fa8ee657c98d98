"""Reads of one rank's progress that several rules share."""

from __future__ import annotations


def in_flight_age(entry, now: float) -> float | None:
    """Seconds the rank's oldest op has been in flight at ``now``, or None."""
    progress = entry.progress
    if not progress.HasField("oldest_in_flight"):
        return None
    return progress.oldest_in_flight.age_ns * 1e-9 + (now - entry.received)


def comm_lane(progress, comm_id: int, lane: int):
    """The rank's CommProgress for one lane of one group, or None. Seqs of the
    collective and p2p lanes are unrelated (docs/records.md)."""
    for comm in progress.comms:
        if comm.comm_id == comm_id and comm.lane == lane:
            return comm
    return None


def last_activity(entry) -> float:
    """When the rank last started or finished an op, on the collector's clock."""
    return entry.received - entry.progress.idle_ns * 1e-9


def behind(findings, comm) -> bool:
    """Whether a member's lane (a CommProgress) stopped before the seq its
    group waits at in ``findings``."""
    for g in findings.hung:
        if g.op.comm_id == comm.comm_id and g.op.kind == comm.lane:
            at = findings.stuck_at(g.op)
            seq = at.seq if at is not None else g.op.seq
            return comm.last_started_seq < seq
    return False
