"""What the trust tests share: a second local user, and a disk that is full.

The second user is uid/gid 65534 (nobody): a process of another user, which
the tool must not trust (docs/security.md). Tests that need one run only as
root (``as_root``) and skip, saying why, otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second local user")


def as_nobody(code: str, *args: str) -> None:
    """Run ``code`` (Python, with ``args`` as sys.argv[1:]) as uid/gid 65534."""
    wrapped = f"import os, sys; os.setgid({NOBODY}); os.setuid({NOBODY}); {code}"
    out = subprocess.run([sys.executable, "-c", wrapped, *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr


@contextlib.contextmanager
def full_tmpfs(mnt, keep_room_for=()):
    """A 64 KiB tmpfs mounted at ``mnt`` and filled up: every write that needs
    a page fails (ENOSPC), as on the issue's disk. ``keep_room_for``:
    directories made inside it first, while there is room. Skips where the
    mount needs a root this test does not have."""
    os.makedirs(mnt, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a 64 KiB tmpfs needs root (CAP_SYS_ADMIN)")
    try:
        for name in keep_room_for:
            os.mkdir(os.path.join(mnt, name))
        fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:    # ENOSPC: full
            pass
        finally:
            os.close(fd)
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


@contextlib.contextmanager
def shared_timeline(prefix: str):
    """A root-owned 1777 directory (a shared --timeline-path) and root's own
    victim directory beside it, under a fresh directory in /tmp."""
    base = tempfile.mkdtemp(prefix=prefix)
    os.chmod(base, 0o755)
    timeline, victim = os.path.join(base, "timeline"), os.path.join(base, "victim")
    os.mkdir(timeline)
    os.chmod(timeline, 0o1777)
    os.mkdir(victim, 0o700)
    try:
        yield timeline, victim
    finally:
        shutil.rmtree(base)
