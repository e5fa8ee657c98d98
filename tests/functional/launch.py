"""Run the real ``xpu_timer_launch`` in a process of its own and watch its output.

``Launch`` is bench/launch_job.py's (bench/slow_detect.py uses it too, and a
bench imports no test module), but its launcher is forked from the
preloaded-torch server (tests/preloaded.py) rather than started as a
new interpreter: a launcher is torchrun, and its import of torch is about 2
CPU-seconds before it does anything, in each of the suite's ~130 jobs. The
fork runs the same console script, as ``__main__``, with its own argv,
environment, working directory, session and stdout and stderr (FIFOs, read
as pipes), importing our code fresh; what it skips is the interpreter's
start and torch's import, and at its exit the modules' teardown.
``fresh=True`` starts a new interpreter as a user's shell would (the
tests whose subject is that start, and the demo's).
"""

from __future__ import annotations

import os

import pytest

from bench import launch_job
from bench.launch_job import ROOT, launcher  # noqa: F401
from tests import preloaded


class Launch(launch_job.Launch):
    def __init__(self, args: list[str], env: dict | None = None, command: list[str] | None = None,
                 fresh: bool = False):
        self._fresh = fresh
        super().__init__(args, env, command)

    def _start(self, argv: list[str], env: dict, ours: bool):
        if not ours or self._fresh or not os.path.isfile(argv[0]):   # a command, or no console script
            return super()._start(argv, env, ours)
        return preloaded.Forked(argv, env, ROOT, streams=True, session=True)

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
