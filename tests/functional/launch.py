"""Run the real ``xpu_timer_launch`` in a subprocess and watch its output.

``Launch`` and ``launcher`` are kept once in bench/launch_job.py (bench/slow_detect.py
uses them too, and a bench imports no test module); the test-only helpers are here.
"""

from __future__ import annotations

import os

import pytest

from bench.launch_job import ROOT, Launch, launcher  # noqa: F401

SCRIPTS = os.path.join(ROOT, "tests", "scripts")


def _started_and_killed():
    started = []
    yield lambda *a, **k: started.append(Launch(*a, **k)) or started[-1]
    for launch in started:
        launch.kill()


@pytest.fixture
def launches():
    """``launches(args, **kw)`` starts a ``Launch``; every one started is
    killed at teardown, so a failing test leaves no job behind."""
    yield from _started_and_killed()


@pytest.fixture(scope="module")
def module_launches():
    """As ``launches``, for a module fixture that starts jobs once (several
    tests read one job, or independent jobs wait side by side); they are
    killed when the module is done."""
    yield from _started_and_killed()


def children_matching(pid: int, needle: str) -> list[int]:
    """Direct children of ``pid`` whose command line contains ``needle``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            ppid = int(stat[stat.rfind(b")") + 2:].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and needle in cmdline:
            out.append(int(entry))
    return out
