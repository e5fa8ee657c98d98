"""Parse every dump of one event into per-view stack groups.

A *group* is one distinct (thread, frames) stack with the bitset of the ranks
that have exactly it; 16,384 ranks stuck in the same place make one group, so
everything downstream costs O(distinct stacks), not O(ranks).

Views: ``py`` holds Python frames (py-spy); ``native`` holds the best native
dump per rank: gdb, else eu-stack, else py-spy ``--native`` (mixed frames).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from diag.common import dumpnames
from viewer.api import PYTHON, ParseResult, ThreadStack, ViewerError
from viewer.discover import DumpFile, Event
from viewer.parsers import parse_file

MAIN = "MainThread"
_NATIVE_ORDER = (dumpnames.GDB, dumpnames.EU_STACK, dumpnames.PYSPY)
_MIN_SHARD = 256  # fewer files than this a process: not worth a worker
# A world size read from a name or hang.json is believed up to this many times
# the ranks held (a SLOW event dumps a few ranks of a big job), and always up to
# WORLD_FLOOR; beyond that it is a typo or a hostile name (rank0-of-999999999).
WORLD_PER_RANK = 1024
WORLD_FLOOR = 1 << 16


@dataclass
class Loaded:
    world: int
    views: dict[str, dict[tuple, list[int]]]   # view -> (thread, frames) -> ranks
    errors: dict[int, str] = field(default_factory=dict)  # rank -> why it has no stack
    bad_lines: dict[str, int] = field(default_factory=dict)  # file name -> skipped lines
    notes: list[str] = field(default_factory=list)

    def ranks(self, view: str) -> set[int]:
        return {r for rs in self.views[view].values() for r in rs}


# Frames that every native thread starts with; a thread's role is the first other one.
_PLUMBING = re.compile(r"^(\?\?|_*clone3?|start_thread|_start|__libc_start\w*|execute_native_thread_routine|"
                       r".*::_M_run|std::thread::.*|pythread_wrapper|thread_run|_?Py\w*|method_vectorcall\w*|"
                       r"cfunction_\w*|do_call_core|slot_tp_\w*)$")


def _generic(t: ThreadStack, main_name: str | None) -> bool:
    """No real name: eu-stack gives none, gdb repeats the process name."""
    return t.name == "thread" or t.name.startswith("thread-") or (not t.is_main and t.name == main_name)


def _role(t: ThreadStack) -> str | None:
    return next((f.func for f in t.frames if not _PLUMBING.match(f.func)), None)


def thread_keys(threads: list[ThreadStack]) -> list[tuple[str, ThreadStack]]:
    """Name threads so the same thread gets the same key on every rank.

    The main thread is always MainThread. A thread without a real name is
    named by its role, the first frame below the thread plumbing (e.g.
    ``thread[c10d::ProcessGroupGloo::runLoop]``), so threads line up across
    ranks even when one rank has an extra thread. A key used twice in one
    process gets ``#2``, ``#3`` in thread-id order: no rank counts twice.
    """
    ordered = sorted(threads, key=lambda t: (not t.is_main, t.tid))
    main_name = next((t.name for t in ordered if t.is_main), None)
    seen: dict[str, int] = defaultdict(int)
    out = []
    for t in ordered:
        name = MAIN if t.is_main else t.name
        if not t.is_main and _generic(t, main_name):
            role = _role(t)
            name = f"thread[{role}]" if role else "thread"
        seen[name] += 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", t))
    return out


def _kind(f: DumpFile) -> str:
    if f.fmt in _NATIVE_ORDER:
        return f.fmt
    from viewer.parsers import sniff
    try:
        head = f.path.read_text(errors="replace")[:4096]
    except OSError:
        return "py"
    s = sniff(head) or "py"
    return "py" if s.startswith("py-") else s


def _parse_rank(rank: int, files: list[DumpFile], out: Loaded) -> dict[str, tuple[str, ParseResult]]:
    """Parse one rank's files: format kind -> (file name, result). Notes go to ``out``."""
    kinds: dict[str, tuple[str, ParseResult]] = {}
    for f in files:
        if f.fmt == "error":
            try:
                out.errors.setdefault(rank, f.path.read_text(errors="replace").strip().splitlines()[0])
            except (OSError, IndexError):
                out.errors.setdefault(rank, f"{f.path.name} (unreadable)")
            continue
        try:
            res = parse_file(f.path, f.fmt)
        except ViewerError as e:
            out.notes.append(str(e))
            out.errors.setdefault(rank, str(e))
            continue
        if res.bad_lines:
            out.bad_lines[f.path.name] = res.bad_lines
        kind = _kind(f)
        if kind in kinds:
            first = kinds[kind][0]
            out.notes.append(f"duplicate rank {rank}: {first} and {f.path.name} are both "
                             f"{kind} dumps; using {first} (remove one to choose)")
            continue
        kinds[kind] = (f.path.name, res)
    if kinds:
        out.errors.pop(rank, None)
    return kinds


def _group(rank: int, kinds: dict[str, tuple[str, ParseResult]], out: Loaded) -> None:
    if "py" in kinds:  # whole stacks here; _python_only drops the native frames once per group
        for key, t in thread_keys(kinds["py"][1].threads):
            out.views["py"][(key, t.frames)].append(rank)
    for kind in _NATIVE_ORDER:
        res = kinds.get(kind, (None, None))[1]
        if res is None or (kind == "py" and all(f.kind == PYTHON for t in res.threads for f in t.frames)):
            continue
        for key, t in thread_keys(res.threads):
            if t.frames:
                out.views["native"][(key, t.frames)].append(rank)
        break


def _new() -> Loaded:
    return Loaded(world=0, views={"py": defaultdict(list), "native": defaultdict(list)})


def load_ranks(shard: list[tuple[int, list[DumpFile]]]) -> Loaded:
    """Parse and group the files of some ranks. Runs in a worker process for big events."""
    out = _new()
    for rank, files in shard:
        _group(rank, _parse_rank(rank, files, out), out)
    return out


def _absorb(out: Loaded, part: Loaded) -> None:
    for view, groups in part.views.items():
        for key, ranks in groups.items():
            out.views[view][key].extend(ranks)
    out.errors.update(part.errors)
    out.bad_lines.update(part.bad_lines)
    out.notes.extend(part.notes)


def _world(event: Event, ranks: set[int], notes: list[str]) -> int:
    """The largest of: highest rank held + 1, the names' world sizes, hang.json's.
    A claimed size past WORLD_PER_RANK x the ranks held (and WORLD_FLOOR) is
    unknown, with one note: it costs nothing (rank sets are as long as the
    ranks held) but would read as a world of absent ranks."""
    held = max(ranks, default=-1) + 1
    cap = max(WORLD_FLOOR, WORLD_PER_RANK * max(held, len(event.files)))
    claims: dict[int, str] = {}
    for f in event.files:
        if f.world:
            claims.setdefault(f.world, f"{f.path.name}: the name's")
    hang_world = (event.hang or {}).get("world_size")
    if isinstance(hang_world, int) and hang_world > 0:
        claims.setdefault(hang_world, f"{event.path / dumpnames.HANG_JSON}:")
    believed = {w for w in claims if w <= cap}
    for w in sorted(set(claims) - believed):
        notes.append(f"{claims[w]} world size {w} is unknown (over {cap}, the most believed with "
                     f"{max(held, len(event.files))} ranks held); ignored")
    named = {f.world for f in event.files if f.world in believed}
    if len(named) > 1:
        notes.append(f"file names disagree on the world size ({sorted(named)}); using the largest")
    return max([held, *believed])


def load(event: Event, jobs: int = 1) -> Loaded:
    """Parse all files of ``event`` with up to ``jobs`` processes; never raises for a bad file.

    Ranks are sharded across worker processes only when there are many files:
    a worker returns its shard's groups, which are few, so little is pickled.
    """
    by_rank: dict[int, list[DumpFile]] = defaultdict(list)
    for f in event.files:
        by_rank[f.rank].append(f)
    items = sorted(by_rank.items())
    out = _new()
    out.notes = list(event.notes)
    jobs = max(1, min(jobs, len(items) // _MIN_SHARD))
    if jobs == 1:
        _absorb(out, load_ranks(items))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        size = -(-len(items) // (jobs * 4))
        shards = [items[i:i + size] for i in range(0, len(items), size)]
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            for part in pool.map(load_ranks, shards):
                _absorb(out, part)
    out.views["py"] = _python_only(out.views["py"])
    out.world = _world(event, set(by_rank), out.notes)
    return out


def _python_only(groups: dict[tuple, list[int]]) -> dict[tuple, list[int]]:
    """The py view keeps Python frames only; stacks equal after that merge."""
    out: dict[tuple, list[int]] = defaultdict(list)
    for (thread, frames), ranks in groups.items():
        py = tuple(f for f in frames if f.kind == PYTHON)
        if py:
            out[(thread, py)].extend(ranks)
    for ranks in out.values():
        ranks.sort()
    return out
