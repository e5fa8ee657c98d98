"""Parse every dump of one event into per-view stack groups.

A *group* is one distinct (thread, frames) stack with the bitset of the ranks
that have exactly it; 16,384 ranks stuck in the same place make one group, so
everything downstream costs O(distinct stacks), not O(ranks).

Views: ``py`` holds Python frames (py-spy); ``native`` holds the best native
dump per rank: gdb, else eu-stack, else py-spy ``--native`` (mixed frames).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from viewer.api import PYTHON, ParseResult, ThreadStack, ViewerError
from viewer.discover import DumpFile, Event
from viewer.parsers import parse_file

MAIN = "MainThread"
_NATIVE_ORDER = ("gdb", "eu-stack", "py")


@dataclass
class Loaded:
    world: int
    views: dict[str, dict[tuple, list[int]]]   # view -> (thread, frames) -> ranks
    errors: dict[int, str] = field(default_factory=dict)  # rank -> why it has no stack
    bad_lines: dict[str, int] = field(default_factory=dict)  # file name -> skipped lines
    notes: list[str] = field(default_factory=list)

    def ranks(self, view: str) -> set[int]:
        return {r for rs in self.views[view].values() for r in rs}


def thread_keys(threads: list[ThreadStack]) -> list[tuple[str, ThreadStack]]:
    """Name threads so the same thread gets the same key on every rank.

    The main thread is always MainThread; a name used twice in one process
    gets ``#2``, ``#3`` in thread-id order, so no rank counts twice in a thread.
    """
    ordered = sorted(threads, key=lambda t: (not t.is_main, t.tid))
    seen: dict[str, int] = defaultdict(int)
    out = []
    for t in ordered:
        name = MAIN if t.is_main else t.name
        seen[name] += 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", t))
    return out


def _kind(f: DumpFile, res: ParseResult) -> str:
    if f.fmt in ("gdb", "eu-stack", "py"):
        return f.fmt
    from viewer.parsers import sniff
    try:
        head = f.path.read_text(errors="replace")[:4096]
    except OSError:
        return "py"
    s = sniff(head) or "py"
    return "py" if s.startswith("py-") else s


def _parse_all(event: Event, out: Loaded) -> dict[int, dict[str, tuple[str, ParseResult]]]:
    per_rank: dict[int, dict[str, tuple[str, ParseResult]]] = defaultdict(dict)
    for f in event.files:
        if f.fmt == "error":
            try:
                out.errors.setdefault(f.rank, f.path.read_text(errors="replace").strip().splitlines()[0])
            except (OSError, IndexError):
                out.errors.setdefault(f.rank, f"{f.path.name} (unreadable)")
            continue
        try:
            res = parse_file(f.path, f.fmt)
        except ViewerError as e:
            out.notes.append(str(e))
            out.errors.setdefault(f.rank, str(e))
            continue
        if res.bad_lines:
            out.bad_lines[f.path.name] = res.bad_lines
        kind = _kind(f, res)
        prev = per_rank[f.rank].get(kind)
        if prev is not None:
            out.notes.append(f"duplicate rank {f.rank}: {prev[0]} and {f.path.name} are both "
                             f"{kind} dumps; using {prev[0]} (remove one to choose)")
            continue
        per_rank[f.rank][kind] = (f.path.name, res)
        out.errors.pop(f.rank, None)
    return per_rank


def _world(event: Event, ranks: set[int], notes: list[str]) -> int:
    named = {f.world for f in event.files if f.world}
    if len(named) > 1:
        notes.append(f"file names disagree on the world size ({sorted(named)}); using the largest")
    candidates = [max(ranks, default=-1) + 1, *named]
    hang_world = (event.hang or {}).get("world_size")
    if isinstance(hang_world, int) and hang_world > 0:
        candidates.append(hang_world)
    return max(candidates)


def load(event: Event) -> Loaded:
    """Parse all files of ``event``; never raises for a bad file (it is noted)."""
    out = Loaded(world=0, views={"py": defaultdict(list), "native": defaultdict(list)},
                 notes=list(event.notes))
    per_rank = _parse_all(event, out)
    for rank in sorted(per_rank):
        kinds = per_rank[rank]
        if "py" in kinds:
            for key, t in thread_keys(kinds["py"][1].threads):
                frames = tuple(f for f in t.frames if f.kind == PYTHON)
                if frames:
                    out.views["py"][(key, frames)].append(rank)
        for kind in _NATIVE_ORDER:
            res = kinds.get(kind, (None, None))[1]
            if res is None or (kind == "py" and all(f.kind == PYTHON for t in res.threads for f in t.frames)):
                continue
            for key, t in thread_keys(res.threads):
                if t.frames:
                    out.views["native"][(key, t.frames)].append(rank)
            break
    out.world = _world(event, set(per_rank) | set(out.errors), out.notes)
    return out
