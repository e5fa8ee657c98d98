"""Which processes the agent may touch: live descendants of the launcher only."""

from __future__ import annotations


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and ')': split after the last ')'.
    fields = data[data.rfind(b")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 else None


def is_alive(pid: int) -> bool:
    """True for a running process; False for a missing or zombie one."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    state = data[data.rfind(b")") + 2:][:1]
    return state not in (b"Z", b"X", b"")


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
