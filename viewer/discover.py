"""Find the event directory and its per-rank dump files.

``--path`` may be the timeline root (``<root>/<job>/<event>/``), one job
directory, one event directory, or any directory of per-rank dumps. Rank and
world size come from the documented name ``rank<R>-of-<W>.<fmt>.<ext>``
(docs/event-dir.md); otherwise from hang.json's ``dumps`` map, otherwise from
the process id inside the dump matched against hang.json's ``ranks[].pid``,
otherwise from the last number in the file name, otherwise from the sorted
file order (and a note says so).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from diag.common import dumpnames
from viewer import hangdoc
from viewer.api import NoStacks, ViewerError

NAME = dumpnames.DUMP_NAME
_DUMP_EXT = (".json", ".txt", ".log", ".dump", ".stack", ".stacks")
# The collector's own files (hang.json, timeline.json, nccl_ras.txt, ...) and
# summary.txt, our own output on a rerun: none is a stack dump.
_SKIP_NAMES = dumpnames.COLLECTOR_FILES + (dumpnames.SUMMARY_TXT,)


@dataclass
class DumpFile:
    """One per-rank file. ``fmt`` is the name's tag (py, gdb, eu-stack, error) or None."""

    path: Path
    rank: int
    world: int | None
    fmt: str | None


@dataclass
class Event:
    """The chosen directory: its dumps, its hang.json (if any), the other events."""

    path: Path
    files: list[DumpFile]
    hang: dict | None
    others: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _listdir(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except PermissionError:
        raise ViewerError(f"{path}: permission denied; run as a user who can read it "
                          f"(or copy the event directory somewhere readable)") from None
    except OSError as e:
        raise ViewerError(f"{path}: cannot list ({e.strerror})") from None


def _is_event(entries: list[Path]) -> bool:
    return any(p.name == dumpnames.HANG_JSON or (p.is_file() and p.suffix in _DUMP_EXT) for p in entries)


def _event_key(path: Path) -> tuple:
    """Newest last: hang.json's declared time, else the directory's mtime."""
    try:
        declared = float(json.loads((path / dumpnames.HANG_JSON).read_text())["declared_unix"])
    except (OSError, ValueError, KeyError, TypeError):
        try:
            declared = path.stat().st_mtime
        except OSError:
            declared = 0.0
    return (declared, path.name)


def _find_events(root: Path) -> list[Path]:
    """Event directories up to two levels below ``root``, oldest first."""
    found = []
    for sub in _listdir(root):
        if not sub.is_dir():
            continue
        entries = _listdir(sub)
        if _is_event(entries):
            found.append(sub)
            continue
        for ev in entries:
            if ev.is_dir() and os.access(ev, os.R_OK | os.X_OK) and _is_event(_listdir(ev)):
                found.append(ev)
    return sorted(found, key=_event_key)


def choose_event(path: Path, event: str) -> tuple[Path, list[Path]]:
    """Return (event dir, the other events). ``event``: a name, job/name, or 'latest'."""
    if not path.exists():
        raise ViewerError(f"--path {path}: no such directory; give the timeline root, "
                          f"an event directory or a directory of per-rank dumps")
    if not path.is_dir():
        raise ViewerError(f"--path {path}: not a directory; give the directory that holds the dumps")
    entries = _listdir(path)
    here = path.resolve()
    if _is_event(entries) and event in ("latest", here.name, f"{here.parent.name}/{here.name}"):
        return path, []
    events = _find_events(path)
    if not events and _is_event(entries):
        raise ViewerError(f"--event {event}: --path {path} is itself the event directory "
                          f"{here.name}; drop --event, or give the timeline root as --path")
    if not events:
        raise NoStacks(f"--path {path}: no stack dumps and no event directories in it; "
                          f"give the timeline root (--timeline-path) or an event directory")
    if event == "latest":
        return events[-1], events[:-1]
    chosen = [e for e in events if e.name == event or f"{e.parent.name}/{e.name}" == event]
    if not chosen:
        names = ", ".join(e.name for e in events[-5:])
        raise ViewerError(f"--event {event}: no such event under {path}; latest ones: {names}")
    return chosen[-1], [e for e in events if e != chosen[-1]]


def _load_hang(path: Path, notes: list[str]) -> dict | None:
    f = path / dumpnames.HANG_JSON
    if not f.exists():
        return None
    try:
        hang = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        notes.append(f"{f}: unreadable hang.json ({e}); showing stacks without collective info")
        return None
    wrong = hangdoc.problem(hang)
    if wrong:
        notes.append(f"{f}: {wrong}; showing stacks without hang.json (fix or remove it)")
        return None
    return hang


def _rank_from_hang(hang: dict | None) -> dict[str, int]:
    out = {}
    for rank, names in ((hang or {}).get("dumps") or {}).items():
        for n in names if isinstance(names, list) else []:
            if str(rank).isdigit():
                out[str(n)] = int(rank)
    return out


def scan(path: Path, event: str = "latest") -> Event:
    """Pick the event and classify its files. Raises ViewerError on bad input."""
    ev_path, others = choose_event(path, event)
    notes: list[str] = []
    hang = _load_hang(ev_path, notes)
    by_hang = _rank_from_hang(hang)
    files, unnamed = [], []
    for p in _listdir(ev_path):
        if p.name in _SKIP_NAMES or p.name.startswith(".") or not p.is_file():
            continue
        m = NAME.match(p.name)
        if m:
            files.append(DumpFile(p, int(m.group(1)), int(m.group(2)), m.group(3)))
        elif p.name in by_hang:
            files.append(DumpFile(p, by_hang[p.name], None, None))
        elif p.suffix in _DUMP_EXT or not p.suffix:
            unnamed.append(p)
    files += _guess_ranks(unnamed, hang, notes)
    return Event(ev_path, files, hang, others, notes)


_PID = re.compile(r'"pid": (\d+)|^Process (\d+):|^PID (\d+)|^Thread 1 \(.*?LWP (\d+)', re.M)


def _pid_of(path: Path) -> int | None:
    """The dumped process's id, from the head of a py-spy, gdb or eu-stack dump."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536).decode("utf-8", errors="replace")
    except OSError:
        return None
    m = _PID.search(head)
    return int(next(g for g in m.groups() if g)) if m else None


def _by_pid(paths: list[Path], hang: dict | None) -> dict[Path, int]:
    pids = {r.get("pid"): r.get("rank") for r in (hang or {}).get("ranks") or []
            if isinstance(r, dict) and isinstance(r.get("pid"), int) and isinstance(r.get("rank"), int)}
    if not pids:
        return {}
    found = {p: pids.get(_pid_of(p)) for p in paths}
    return {p: r for p, r in found.items() if r is not None}


def _guess_ranks(paths: list[Path], hang: dict | None, notes: list[str]) -> list[DumpFile]:
    """Rank = hang.json's rank of the dump's pid; else the last number in the
    name; if names carry none, the sorted order."""
    by_pid = _by_pid(paths, hang)
    out = [DumpFile(p, r, None, None) for p, r in by_pid.items()]
    paths = [p for p in paths if p not in by_pid]
    nums = [re.findall(r"\d+", p.stem) for p in paths]
    if paths and all(nums):
        return out + [DumpFile(p, int(n[-1]), None, None) for p, n in zip(paths, nums)]
    if paths:
        notes.append(f"file names carry no rank numbers; ranks 0-{len(paths) - 1} "
                     f"follow the sorted file names (name files rank<R>-of-<W>.py.json to fix)")
    return out + [DumpFile(p, i, None, None) for i, p in enumerate(paths)]
