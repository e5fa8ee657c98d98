"""Which processes the agent may touch: live descendants of the launcher only."""

from __future__ import annotations


def stat_fields(pid: int) -> list[bytes] | None:
    """/proc/<pid>/stat from field 3 (state) on; None when ``pid`` is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and ')': split after the last ')'.
    return data[data.rfind(b")") + 2:].split()


def parent_of(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[1]) if fields is not None and len(fields) > 1 else None


def is_alive(pid: int) -> bool:
    """True for a running process; False for a missing or zombie one."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] not in (b"Z", b"X")


def is_descendant(pid: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is a strict ancestor of ``pid``."""
    seen = 0
    current = pid
    while current and current > 1 and seen < 4096:
        parent = parent_of(current)
        if parent == ancestor:
            return True
        if parent is None:
            return False
        current = parent
        seen += 1
    return False


class WorkerFiles:
    """What the shm dir's readers of workers' files (the progress regions,
    diag.agent.sampler; the link tables, diag.agent.links) hold alike: a file
    is adopted only when its pid is a live descendant of the launcher
    ``root_pid``, and feeds ``state``. ``is_alive``/``is_descendant`` are the
    pid checks (fakes in tests)."""

    def __init__(self, shm_dir: str, state, root_pid: int, log, is_alive=is_alive,
                 is_descendant=is_descendant):
        self.shm_dir = shm_dir
        self.state = state
        self.root_pid = root_pid
        self.log = log
        self._is_alive = is_alive
        self._is_descendant = is_descendant
        self._refused: set[str] = set()   # not a worker's, or unreadable: never looked at again
