"""The FAILED verdict from the ranks' exits and their records; its line and failure.json.

Pure: fed RankProgress messages (exited ranks carry ``exit`` once their
launcher has torchrun's result, and ``exited_unix``), unit-tested without a
server (tests/failure/).
"""

from __future__ import annotations

import math
from typing import Mapping

from diag.common.ranks import fold
from diag.failure import records
from diag.failure.api import STOP_SIGNALS, Evidence, Failure, RankExit

VERSION = 1


def exits_of(ranks: Mapping[int, object]) -> dict[int, RankExit]:
    """rank -> RankExit of every rank reported gone (alive = false)."""
    out = {}
    for rank, p in ranks.items():
        if p.alive:
            continue
        if p.HasField("exit"):
            e = p.exit
            out[rank] = RankExit(rank, e.exit_code, e.signal, e.error, e.oom_kill, p.exited_unix,
                                 e.torchrun_root, e.stopped)
        else:
            out[rank] = RankExit(rank, seen_unix=p.exited_unix)
    return out


def judge(ranks: Mapping[int, object]) -> Failure | None:
    """The verdict on the ranks' latest progress (rank -> RankProgress), or
    None: no rank failed, the job was stopped by a signal to its launcher
    (a user's Ctrl-C is no rank's fault), or nothing is known yet."""
    exits = exits_of(ranks)
    if not exits or any(e.stopped for e in exits.values()):
        return None
    found = records.evidence(ranks)
    left = set(found.culprits) if found is not None and found.kind == "left_early" else set()
    failed = [e for e in exits.values() if e.failed]
    own = [e for e in failed if not _stopped_kind(e)] + [exits[r] for r in left if not exits[r].failed]
    if not own:
        own = failed   # ended by SIGTERM/SIGKILL with no other failure: someone outside killed it
    if not own:
        return None
    blamed = set(found.culprits) if found is not None else set()
    own.sort(key=lambda e: (e.seen_unix or math.inf, e.rank not in blamed, e.rank))
    first = own[0]
    then = tuple(e for e in own[1:])
    stopped = tuple(sorted(e.rank for e in failed if _stopped_kind(e) and e not in own))
    culprits = tuple(sorted(blamed)) if blamed else (first.rank,)
    root = next((e.rank for e in exits.values() if e.torchrun_root), None)
    note = _root_note(root, exits, culprits, found) if root is not None and root not in culprits else ""
    return Failure(first, culprits, found, then, stopped, note, root)


def _stopped_kind(e: RankExit) -> bool:
    return e.signal in STOP_SIGNALS and not e.oom_kill


def _root_note(root: int, exits: dict[int, RankExit], culprits: tuple[int, ...], found: Evidence | None) -> str:
    blamed = _who(culprits)
    if found is not None and found.kind == "left_early":
        why = (f"{'it' if len(culprits) == 1 else 'they'} left {found.seq} ops into group {found.group} while "
               f"the others waited for {'it' if len(culprits) == 1 else 'them'}, and rank {root}'s failure "
               "followed from that exit")
    elif found is not None:
        why = f"{'it' if len(culprits) == 1 else 'they'} ran a different op at seq {found.seq} of group {found.group}"
    else:
        why = "it failed first"
    return f"torchrun's Root Cause names rank {root} ({exits[root].how()}); the records blame {blamed}: {why}"


def _who(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {fold(ranks)}"


def line(failure: Failure, event_dir: str, stacks: bool) -> str:
    """``FAILED: rank 1 failed first (killed by SIGABRT); the ranks diverged
    on group "default" (ranks 0-2) at seq 19: ...; culprit rank(s) 1; stacks in DIR/``."""
    first = failure.first
    left = failure.evidence is not None and failure.evidence.kind == "left_early" \
        and first.rank in failure.evidence.culprits and not first.failed
    parts = [f"rank {first.rank} {'left' if left else 'failed'} first ({first.how()})"]
    if failure.evidence is not None:
        parts.append(failure.evidence.summary)
    by_how: dict[str, list[int]] = {}
    for e in failure.then:
        by_how.setdefault(e.how(error=False), []).append(e.rank)
    if by_how:
        parts.append("then " + ", ".join(f"{_who(r)} {h}" for h, r in by_how.items()))
    if failure.stopped:
        parts.append(f"{_who(failure.stopped)} stopped by torchrun after that (SIGTERM/SIGKILL)")
    if failure.root_note:
        parts.append(failure.root_note)
    parts.append(f"culprit rank(s) {fold(list(failure.culprits))}")
    parts.append(f"{'stacks' if stacks else 'details'} in {event_dir.rstrip('/')}/")
    return "FAILED: " + "; ".join(parts)


def document(failure: Failure, ranks: Mapping[int, object], *, job_id: str, event_id: str, world_size: int,
             declared_unix: float, verdict: str, alive_at_failure: list[int]) -> dict:
    """failure.json (docs/event-dir.md)."""
    exits = exits_of(ranks)
    ev = failure.evidence
    return {
        "version": VERSION, "job_id": job_id, "event_id": event_id, "declared_unix": declared_unix,
        "world_size": world_size, "verdict": verdict,
        "first_failed": _exit_doc(failure.first),
        "culprits": list(failure.culprits),
        "evidence": None if ev is None else dict(kind=ev.kind, summary=ev.summary, comm_id=ev.comm_id,
                                                 group=ev.group, seq=ev.seq, **ev.detail),
        "failed_after": [e.rank for e in failure.then],
        "stopped_by_torchrun": list(failure.stopped),
        "torchrun_root_cause": None if failure.torchrun_root is None else {
            "rank": failure.torchrun_root, "agrees": failure.torchrun_root in failure.culprits,
            "note": failure.root_note},
        "alive_at_failure": alive_at_failure,
        "exits": [_exit_doc(e) for _, e in sorted(exits.items())],
    }


def _exit_doc(e: RankExit) -> dict:
    return {"rank": e.rank, "how": e.how(), "exit_code": e.exit_code, "signal": e.signal, "error": e.error,
            "oom_kill": e.oom_kill, "seen_unix": e.seen_unix or None, "torchrun_root": e.torchrun_root}
