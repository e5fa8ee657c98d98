"""Directories in /dev/shm do not outlive a launcher killed by SIGKILL: the
next one sweeps them (diag/common/owned_dirs.py). A live owner's, another
user's and an unmarked one are left alone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from diag.common import owned_dirs

HOLD = ("import sys, time; from diag.common import owned_dirs; "
        "print(owned_dirs.make('xpu_diag-test-', sys.argv[1]), flush=True); time.sleep(600)")


def _holder(base):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(base)], stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def test_a_killed_owners_directory_is_swept_and_a_live_ones_kept(tmp_path):
    killed, gone = _holder(tmp_path)
    live, kept = _holder(tmp_path)
    try:
        (tmp_path / os.path.basename(gone) / "big.ring").write_bytes(b"x" * 4096)
        unmarked = tmp_path / "xpu_diag-older"              # made before marks existed: not ours to judge
        unmarked.mkdir()
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert owned_dirs.sweep(str(tmp_path)) == [gone]
        assert not os.path.exists(gone) and os.path.isdir(kept) and unmarked.is_dir()
    finally:
        live.kill()
        live.wait()
    assert owned_dirs.sweep(str(tmp_path)) == [kept]


def test_the_makers_own_directory_is_never_swept_and_removal_lets_go(tmp_path):
    path = owned_dirs.make("xpu_diag-mine-", str(tmp_path))
    assert oct(os.stat(path).st_mode & 0o777) == "0o700"
    assert owned_dirs.sweep(str(tmp_path)) == [] and os.path.isdir(path)
    owned_dirs.remove(path)
    assert not os.path.exists(path) and path not in owned_dirs._held


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second local user")
def test_another_users_directory_and_a_planted_link_are_left_alone(tmp_path):
    base = tempfile.mkdtemp(prefix="owned-dirs-test-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        os.chmod(base, 0o1777)   # a shared tmpfs, as /dev/shm is
        # nobody (65534) makes a marked directory and exits: not ours, whatever its lock says.
        code = ("import os, sys; from diag.common import owned_dirs; os.setgid(65534); os.setuid(65534); "
                "print(owned_dirs.make('xpu_diag-theirs-', sys.argv[1]))")
        out = subprocess.run([sys.executable, "-c", code, base], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        theirs = out.stdout.strip()
        # and plants a link named as ours, to a marked directory of ours elsewhere
        target = tmp_path / "precious"
        target.mkdir()
        (target / owned_dirs.MARK).write_text("")
        os.symlink(target, os.path.join(base, "xpu_diag-link"))
        assert owned_dirs.sweep(base) == []
        assert os.path.isdir(theirs) and (target / owned_dirs.MARK).exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)
