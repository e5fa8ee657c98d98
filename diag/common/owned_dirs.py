"""Private directories in /dev/shm that do not outlive the process that made them.

The launcher makes its progress-region directory and the node's snapshot
store (which can hold gigabytes) in tmpfs, and removes them when it exits.
A launcher killed by SIGKILL (a node's processes killed whole, an OOM kill)
removes nothing, and tmpfs keeps them until reboot. So each such directory
is locked (``flock`` on the directory, released by the kernel whatever way
the process ends) before it is marked as owned, and a launcher starting
sweeps the directories of the same prefix whose lock it can take: their
owner is gone.

Only this user's own directories (``lstat``: no link is followed) that carry
the mark are swept: another user's, or one being made (locked, not yet
marked), never.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile

PREFIX = "xpu_diag-"
MARK = ".owned"      # written once the directory is locked
_held: dict[str, int] = {}   # path -> the locked directory's fd, for the process's life


def make(prefix: str, base: str | None) -> str:
    """``tempfile.mkdtemp`` (0700), locked and marked as this process's."""
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # just made, 0700: nobody else holds it
    os.close(os.open(os.path.join(path, MARK), os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    _held[path] = fd
    return path


def remove(path: str) -> None:
    """Remove a directory :func:`make` made, and let go of it. Never raises."""
    shutil.rmtree(path, ignore_errors=True)
    fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)


def sweep(base: str | None) -> list[str]:
    """Remove this user's marked ``xpu_diag-*`` directories in ``base`` whose
    owner is gone; return them. Never raises."""
    base = base or tempfile.gettempdir()
    removed = []
    try:
        names = [n for n in os.listdir(base) if n.startswith(PREFIX)]
    except OSError:
        return removed
    uid = os.geteuid()
    for name in names:
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or path in _held:
                continue
            os.lstat(os.path.join(path, MARK))     # not marked: being made, or not ours to judge
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:       # held: its owner lives
            os.close(fd)
            continue
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)
        removed.append(path)
    return removed
