"""Once per event: the hang and idle rules fire once and re-arm when progress resumes."""

from __future__ import annotations

from diag.hang.api import Findings, IdleStall, OpKey, SilentAgent, View
from diag.hang.progress import last_activity

# A rank's last activity, estimated at each report, moves by the report's
# transit time; more than this means it did something.
ACTIVITY_SLACK_S = 1.0


class HangDetector:
    """Fires once per hang event and re-arms when progress resumes.

    An event is remembered as (rank -> pid, op) for the ranks hung when it
    fired. It is over when none of them is still in that op with that pid:
    the ops completed, or the workers restarted (new pids). Ranks whose agent
    is silent count as still stuck (no news is not progress). Silent agents
    are announced once per silence and re-announced after they come back.
    """

    def __init__(self) -> None:
        self._event: dict[int, tuple[int, OpKey]] | None = None
        self._fired: tuple | None = None   # (hung groups, snapshot's ranks) the event's dict is built from
        self._silent_announced: set[int] = set()

    @property
    def armed(self) -> bool:
        return self._event is None

    def update(self, findings: Findings, snap: View) -> tuple[bool, bool, list[SilentAgent]]:
        """Returns (fire, rearmed, newly_silent) for this evaluation."""
        silent_now = {a.node_rank for a in findings.silent_agents}
        newly_silent = [a for a in findings.silent_agents if a.node_rank not in self._silent_announced]
        self._silent_announced = silent_now
        rearmed = False
        if self._event is not None and not self._still_stuck(snap, silent_now):
            self._event, self._fired, rearmed = None, None, True
        fire = self._event is None and findings.is_hang
        if fire:
            # Built at the next look, not now: at 100,000 hung ranks the dict
            # costs a fair part of a second the HANG line must not wait for.
            self._event, self._fired = {}, (findings.hung, snap.ranks)
        return fire, rearmed, newly_silent

    def _event_ranks(self) -> dict[int, tuple[int, OpKey]]:
        if self._fired is not None:
            hung, ranks = self._fired
            self._event, self._fired = {r: (ranks[r].progress.pid, g.op) for g in hung for r in g.ranks}, None
        return self._event

    def _still_stuck(self, snap: View, silent_nodes: set[int]) -> bool:
        for rank, (pid, op) in self._event_ranks().items():
            entry = snap.ranks.get(rank)
            if entry is None:
                continue  # its agent left cleanly: the job or node is done
            if entry.node_rank in silent_nodes:
                return True
            p = entry.progress
            if p.pid != pid or not p.alive or not p.HasField("oldest_in_flight"):
                continue
            cur = p.oldest_in_flight
            if (cur.name, cur.kind, cur.comm_id, cur.seq) == (op.name, op.kind, op.comm_id, op.seq):
                return True
        return False


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
