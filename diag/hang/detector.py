"""Once per event: the hang and idle rules fire once and re-arm when progress resumes."""

from __future__ import annotations

from diag.hang.api import Findings, IdleStall, OpKey, SilentAgent, View
from diag.hang.progress import last_activity

# A rank's last activity, estimated at each report, moves by the report's
# transit time; more than this means it did something.
ACTIVITY_SLACK_S = 1.0


class HangDetector:
    """Fires once per hang event and re-arms as soon as it is over.

    An event is remembered as (rank -> pid, op, when the op started, the
    collectives the rank had completed) for the ranks hung when it fired. It
    is over when none of them is still stuck in that op:
    - the op ended, or a newer op of the same name and seq is in flight (a
      host function called again: ops of no communicator all have seq 0), so
      the op in flight is compared by when it started, not only by its key;
    - the workers restarted (new pids);
    - for an op on no communicator (a host function, a GEMM), the rank
      completed a collective since: the job moves on, so whatever that op
      waits for, the job does not wait for it. The op itself is then not
      declared again while it stays in flight (``_moving``).
    Ranks whose agent is silent count as still stuck (no news is not
    progress). Silent agents are announced once per silence and
    re-announced after they come back.
    """

    def __init__(self) -> None:
        self._event: dict[int, tuple] | None = None   # rank -> (pid, OpKey, started, completed)
        self._fired: tuple | None = None   # (hung groups, snapshot's ranks) the event's dict is built from
        self._silent_announced: set[int] = set()
        self._moving: dict[int, tuple] = {}   # rank -> the event entry of an op the job moved past
        self._forgiven_s = 0.0   # the collector's own pauses since the event: ages read that much short

    @property
    def armed(self) -> bool:
        return self._event is None

    def forgive(self, paused_s: float) -> None:
        """The collector took ``paused_s`` out of every rank's age
        (JobState.forgive_pause): an op's start reads that much later."""
        self._forgiven_s += paused_s

    def update(self, findings: Findings, snap: View) -> tuple[bool, bool, list[SilentAgent]]:
        """Returns (fire, rearmed, newly_silent) for this evaluation."""
        silent_now = {a.node_rank for a in findings.silent_agents}
        newly_silent = [a for a in findings.silent_agents if a.node_rank not in self._silent_announced]
        self._silent_announced = silent_now
        rearmed = False
        if self._event is not None and not self._still_stuck(snap, silent_now):
            self._event, self._fired, rearmed = None, None, True
            self._forgiven_s = 0.0
        fire = self._event is None and findings.is_hang and self._news(findings, snap)
        if fire:
            # Built at the next look, not now: at 100,000 hung ranks the dict
            # costs a fair part of a second the HANG line must not wait for.
            self._event, self._fired = {}, (findings.hung, snap.ranks)
            self._moving = {}
        return fire, rearmed, newly_silent

    def _event_ranks(self) -> dict[int, tuple]:
        if self._fired is not None:
            hung, ranks = self._fired
            self._event, self._fired = {r: _entry(ranks[r], g.op) for g in hung for r in g.ranks}, None
        return self._event

    def _still_stuck(self, snap: View, silent_nodes: set[int]) -> bool:
        stuck = False
        for rank, held in self._event_ranks().items():
            entry = snap.ranks.get(rank)
            if entry is None:
                continue  # its agent left cleanly: the job or node is done
            if entry.node_rank in silent_nodes:
                return True
            if not self._same_op(entry, held):
                continue
            if not held[1].is_comm_op and _completed(entry.progress) > held[3]:
                self._moving[rank] = held   # the job moved past it
                continue
            stuck = True
        return stuck

    def _same_op(self, entry, held) -> bool:
        """Whether the rank is still in the very op ``held`` names."""
        pid, op, started = held[0], held[1], held[2]
        p = entry.progress
        if p.pid != pid or not p.alive or not p.HasField("oldest_in_flight"):
            return False
        cur = p.oldest_in_flight
        if (cur.name, cur.kind, cur.comm_id, cur.seq) != (op.name, op.kind, op.comm_id, op.seq):
            return False
        return abs(_started(entry) - started) <= ACTIVITY_SLACK_S + self._forgiven_s

    def _news(self, findings: Findings, snap: View) -> bool:
        """Whether a hung rank is in an op other than the ones the job moved past."""
        if not self._moving:
            return True
        for group in findings.hung:
            for rank in group.ranks:
                held = self._moving.get(rank)
                entry = snap.ranks.get(rank)
                if held is None or entry is None or held[1] != group.op or not self._same_op(entry, held):
                    return True
        return False


def _started(entry) -> float:
    """When the rank's oldest op in flight started, on the collector's clock."""
    return entry.received - entry.progress.oldest_in_flight.age_ns * 1e-9


def _completed(progress) -> int:
    """Collectives and p2p ops the rank has completed, all its groups together."""
    return sum(comm.last_completed_seq for comm in progress.comms)


def _entry(entry, op: OpKey) -> tuple:
    p = entry.progress
    started = _started(entry) if p.HasField("oldest_in_flight") else float("nan")
    return p.pid, op, started, _completed(p)


class IdleDetector:
    """Fires once per idle stall; re-arms as soon as any rank of it is active
    again (an op started or finished, or a new pid: torchrun restarted it)."""

    def __init__(self) -> None:
        self._event: dict[int, tuple[int, float]] | None = None   # rank -> (pid, last activity)

    @property
    def armed(self) -> bool:
        return self._event is None

    def update(self, stall: IdleStall | None, snap: View) -> bool:
        """True when ``stall`` is a new event to declare."""
        if self._event is not None and self._over(snap):
            self._event = None
        if self._event is not None or stall is None:
            return False
        self._event = {r: (snap.ranks[r].progress.pid, last_activity(snap.ranks[r])) for r in stall.ranks}
        return True

    def _over(self, snap: View) -> bool:
        for rank, (pid, active_at) in self._event.items():
            entry = snap.ranks.get(rank)
            if entry is None:
                continue
            p = entry.progress
            if (p.pid != pid or p.HasField("oldest_in_flight")
                    or (p.alive and last_activity(entry) > active_at + ACTIVITY_SLACK_S)):
                return True
        return False
