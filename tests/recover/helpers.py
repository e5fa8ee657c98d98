"""Small real processes for the store and persist tests."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest

from tests.recover import jobs

BIG = str(Path(__file__).parent / "scripts" / "bigstate.py")


def big(mb: int, steps: int, store=None, persist=None, **extra: str):
    """scripts/bigstate.py in a process of its own, forked with torch already
    imported (tests/recover/preloaded.py); ``extra``: more environment."""
    return jobs.forked([BIG, str(mb), str(steps)], store, persist, **extra)


def big_run(mb: int, steps: int, store=None, persist=None, timeout: float = 60):
    proc = big(mb, steps, store, persist)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@contextlib.contextmanager
def small_tmpfs(mnt: Path, size: str, why: str):
    """A ``size`` tmpfs mounted at ``mnt`` (made here), so that a write past
    it fails with ENOSPC; skips, saying ``why``, where the mount is refused."""
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip(why)
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)])
