"""Small real processes for the store and persist tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.recover import jobs

BIG = str(Path(__file__).parent / "scripts" / "bigstate.py")


def big(mb: int, steps: int, store=None, persist=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, BIG, str(mb), str(steps)], cwd=jobs.ROOT,
                            env=jobs.env(store, persist), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


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
