"""A small tmpfs for tests of what happens when a filesystem has no room."""

import contextlib
import os
import subprocess

import pytest


@contextlib.contextmanager
def small_tmpfs(mnt, size: str):
    """A tmpfs of ``size`` (mount's ``size=`` option: "64k") mounted at the
    new directory ``mnt``, unmounted (lazily, so a process still in it cannot
    keep it) on leaving. Skips the test without root or where the mount is
    refused."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    os.mkdir(mnt)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], timeout=30)
