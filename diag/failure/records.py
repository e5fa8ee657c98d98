"""What the progress records show of a failed job: a divergence, or a rank that left early.

Reads each rank's latest RankProgress, exited ranks included (their agents
send their last ops' fingerprints once they are gone, docs/agent.md). The
fingerprint comparison is the divergence rule's (diag/hang/divergence.py),
run over every member of a group rather than the live ones only.
"""

from __future__ import annotations

from typing import Mapping

from diag.common.ranks import fold
from diag.failure.api import Evidence
from diag.hang.divergence import compare_members, describe
from diag.records.format import KIND_COLLECTIVE

DEFAULT_GROUP = 0


def evidence(ranks: Mapping[int, object]) -> Evidence | None:
    """``ranks``: rank -> RankProgress. A divergence where one is seen (the
    largest group first), else the rank that left earliest with fewer ops
    than its peers, else None."""
    groups = _groups(ranks)
    found = [e for e in (_diverged(g) for g in groups) if e is not None]
    if found:
        return found[0]
    left = [e for e in (_left_early(g, ranks) for g in groups) if e is not None]
    return min(left, key=lambda e: (e.seq, e.culprits)) if left else None


class _Group:
    def __init__(self, comm_id: int) -> None:
        self.comm_id = comm_id
        self.name = ""
        self.members: list[tuple[int, object]] = []   # (rank, CommProgress of the collective lane)

    def label(self) -> str:
        name = self.name or ("default" if self.comm_id == DEFAULT_GROUP else "")
        shown = f'"{name}"' if name else str(self.comm_id)
        return f"{shown} (ranks {fold(sorted(r for r, _ in self.members))})"


def _groups(ranks: Mapping[int, object]) -> list[_Group]:
    """Each group's collective lane with the ranks that report it, largest first."""
    by_id: dict[int, _Group] = {}
    for rank, progress in ranks.items():
        for comm in progress.comms:
            if comm.lane != KIND_COLLECTIVE or not comm.last_started_seq:
                continue
            group = by_id.setdefault(comm.comm_id, _Group(comm.comm_id))
            group.name = group.name or comm.group_name
            group.members.append((rank, comm))
    return sorted(by_id.values(), key=lambda g: (-len(g.members), g.comm_id))


def _diverged(group: _Group) -> Evidence | None:
    if sum(1 for _, c in group.members if c.HasField("recent")) < 2:
        return None
    top = max(c.last_started_seq for _, c in group.members)
    found = compare_members(group.members, group.comm_id, KIND_COLLECTIVE, group.name, top)
    if found is None or found.diverged_seq is None:
        return None
    variants = [{"op": v.op, "ranks": list(v.ranks)} for v in found.variants]
    summary = found.summary.replace("the ranks diverged", f"the ranks diverged on group {group.label()}", 1)
    return Evidence("diverged", summary, tuple(found.culprits), group.comm_id, group.label(), found.diverged_seq,
                    {"variants": variants, "minority": list(found.minority), "tie": found.tie,
                     "skips": [{"ranks": list(s.ranks), "skipped": s.skipped, "evidence": s.evidence}
                               for s in found.skips]})


def _left_early(group: _Group, ranks: Mapping[int, object]) -> Evidence | None:
    """The exited member that had started the fewest ops of the group while
    others had started more: those were waiting for it (an op that failed
    for want of it ended too, so their completed seqs do not tell)."""
    gone = [(c.last_started_seq, r) for r, c in group.members if not ranks[r].alive]
    if not gone:
        return None
    seq, _ = min(gone)
    left = sorted(r for s, r in gone if s == seq)
    peers = sorted(r for r, c in group.members if c.last_started_seq > seq)
    if not peers:
        return None
    peer_seq = min(c.last_started_seq for r, c in group.members if r in peers)
    op = _op_at(group, peers, seq + 1)
    who = f"rank {left[0]}" if len(left) == 1 else f"ranks {fold(left)}"
    them = f"rank {peers[0]} was" if len(peers) == 1 else f"ranks {fold(peers)} were"
    summary = (f"{who} left after {seq} op{'s' if seq != 1 else ''} on group {group.label()} while {them} in "
               f"their {_nth(seq + 1)}{' (' + op + ')' if op else ''}")
    return Evidence("left_early", summary, tuple(left), group.comm_id, group.label(), seq,
                    {"left": left, "left_after": seq, "peers": peers, "peers_in": seq + 1,
                     "peers_last_started": peer_seq, "peers_op": op})


def _op_at(group: _Group, ranks: list[int], seq: int) -> str:
    """The op the ranks ran at ``seq`` as the HANG line says it, from their fingerprints."""
    for rank, comm in group.members:
        if rank in ranks and comm.HasField("recent"):
            i = seq - comm.recent.first_seq
            if 0 <= i < len(comm.recent.ops):
                fp = comm.recent.ops[i]
                return describe(fp.name, fp.bytes, fp.dtype, fp.reduce_op, fp.peer)
    return ""


def _nth(n: int) -> str:
    tail = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{tail}"
