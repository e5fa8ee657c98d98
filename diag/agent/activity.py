"""What a rank's processes are doing, read cheaply from /proc.

A rank that waits on nothing but looks stuck (a checkpoint write, an
evaluation, a compile warm-up, data-loader workers starting) still burns CPU
or moves bytes somewhere in its process tree; a rank that is truly blocked
(a deadlock, a sleep that never ends, a collective whose peers never come)
does neither. The collector's evidence rules (diag/hang) compare these
counters over time; here they are only read.

The tree is the rank's process and its live descendants (data-loader
workers, compile workers), found through ``/proc/<pid>/task/<tid>/children``:
a checkpoint written by a helper process is progress of the rank.
Counters of a descendant that exited are lost, so the sums may step down;
readers take a drop as activity (something changed), never as idleness.

Everything read here belongs to the launcher's own descendants (the rank's
pid was checked by the sampler); nothing is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from diag.agent import procs

MAX_PROCS = 256      # a tree larger than this is summed over its first 256 processes
# Busy: more CPU than this share of one core between two reads. An idle rank's
# threads (gloo's loop, NCCL's watchdog, a data loader's 5 s liveness poll)
# stay far below it; a rank evaluating, compiling or writing a checkpoint
# through a CPU-bound codec is far above.
BUSY_CPU_SHARE = 0.05
_TICK_NS = 1_000_000_000 // (os.sysconf("SC_CLK_TCK") or 100)


@dataclass(frozen=True)
class Activity:
    cpu_ns: int      # user + system CPU time of the tree's live processes
    wait_ns: int     # time their main threads sat runnable on a run queue, waiting for a CPU
    io_bytes: int    # bytes read and written: syscalls' and the storage layer's
    procs: int       # processes summed
    disk_wait: bool  # the rank's main thread sleeps uninterruptibly (state D): in I/O
    runnable: bool = False   # a main thread in the tree is running or waits on a run queue (state R)


def of_tree(pid: int) -> Activity | None:
    """The counters of ``pid``'s process tree; None when ``pid`` is gone."""
    stat = _stat(pid)
    if stat is None:
        return None
    cpu, state = stat
    disk_wait, runnable = state == b"D", state == b"R"
    wait = _run_delay(pid)
    io = _io_bytes(pid)
    count, todo, seen = 1, _children(pid), {pid}
    while todo and count < MAX_PROCS:
        child = todo.pop()
        if child in seen:
            continue
        seen.add(child)
        c = _stat(child)
        if c is None:     # exited between the listing and the read
            continue
        cpu += c[0]
        runnable = runnable or c[1] == b"R"
        wait += _run_delay(child)
        io += _io_bytes(child)
        count += 1
        todo.extend(_children(child))
    return Activity(cpu, wait, io, count, disk_wait, runnable)


def _stat(pid: int) -> tuple[int, bytes] | None:
    """(CPU ns, state letter) of ``pid``'s thread group leader; None when gone."""
    fields = procs.stat_fields(pid)
    if fields is None:
        return None
    try:
        return (int(fields[11]) + int(fields[12])) * _TICK_NS, fields[0]   # utime, stime; state
    except (IndexError, ValueError):
        return None


def _run_delay(pid: int) -> int:
    """ns ``pid``'s main thread has waited on a run queue: a rank that
    computes on a host so loaded that it gets under BUSY_CPU_SHARE of a core
    still wants the CPU, which a blocked rank never does (a false deadlock
    proof on a starved 2-core VM). The main thread only: Python computes
    there, and one read a process keeps the report cheap. 0 where the kernel
    keeps no schedstat. The kernel adds a wait only when the thread gets the
    CPU at last, so a thread starved through a whole interval shows none: its
    state R at the read (``Activity.runnable``) covers that one."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _io_bytes(pid: int) -> int:
    """rchar + wchar (each read and write syscall's bytes, counted when the
    call returns) + read_bytes + write_bytes (the storage layer's, counted
    page by page inside the call): one huge write into a throttled directory
    moves the sum while it is still blocked. 0 where /proc/<pid>/io is not
    ours to read."""
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            data = f.read()
    except OSError:
        return 0
    total = 0
    for line in data.splitlines():
        key, _, value = line.partition(b":")
        if key in (b"rchar", b"wchar", b"read_bytes", b"write_bytes"):
            try:
                total += int(value)
            except ValueError:
                pass
    return total


def _children(pid: int) -> list[int]:
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return found


class QuietClock:
    """How long each rank's tree has shown no activity: no CPU used or
    waited for above BUSY_CPU_SHARE of a core, no change in its I/O bytes or
    its kernel launches, its main thread not in D state (I/O under way) and
    no main thread of the tree in R state (running, or starved of a CPU it
    wants), between consecutive reads. A rank is keyed with its pid: a restarted worker
    starts afresh."""

    def __init__(self):
        self._last: dict = {}    # (rank, pid) -> (Activity, launches, t_ns, busy_at_ns)

    def observe(self, rank: int, pid: int, found: Activity, launches: int, now_ns: int) -> int:
        """The ns since ``rank`` was last seen active (0 on its first read)."""
        key = (rank, pid)
        last = self._last.get(key)
        if last is None:
            busy_at = now_ns
        else:
            before, before_launches, t, busy_at = last
            cpu = found.cpu_ns - before.cpu_ns
            wanted = cpu + found.wait_ns - before.wait_ns
            if (found.disk_wait or found.runnable or found.io_bytes != before.io_bytes or launches != before_launches
                    or found.procs != before.procs or cpu < 0 or wanted > BUSY_CPU_SHARE * (now_ns - t)):
                busy_at = now_ns
        self._last[key] = (found, launches, now_ns, busy_at)
        return now_ns - busy_at

    def forget_others(self, keep) -> None:
        """Drop ranks that are no longer reported (``keep``: live (rank, pid) keys)."""
        for key in [k for k in self._last if k not in keep]:
            del self._last[key]
