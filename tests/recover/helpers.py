"""Small real processes for the store and persist tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
