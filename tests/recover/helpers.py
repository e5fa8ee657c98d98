"""Small real processes for the store and persist tests."""

from __future__ import annotations

from pathlib import Path

from tests.recover import jobs

BIG = str(Path(__file__).parent / "scripts" / "bigstate.py")


def big(mb: int, steps: int, store=None, persist=None, **extra: str):
    """scripts/bigstate.py in a process of its own, forked with torch already
    imported (tests/preloaded.py); ``extra``: more environment."""
    return jobs.forked([BIG, str(mb), str(steps)], store, persist, **extra)


def big_run(mb: int, steps: int, store=None, persist=None, timeout: float = 60):
    proc = big(mb, steps, store, persist)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err
