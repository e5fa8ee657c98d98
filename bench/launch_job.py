"""Run the real ``xpu_timer_launch`` in a subprocess and watch its output.

Used by bench/slow_detect.py and by the tests (tests/functional/launch.py
re-exports it); kept in bench/ so that no bench imports a test module.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def launcher() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "xpu_timer_launch")
    return [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "diag.launcher.main"]


class Launch:
    """One launcher process; its output lines are kept with arrival times.

    ``command`` replaces the launcher (bench/verdict_race.py starts torchrun and
    NVRx's ft_launcher the same way)."""

    def __init__(self, args: list[str], env: dict | None = None, command: list[str] | None = None):
        # Not PYTHONUNBUFFERED: unbuffered print() writes text and newline apart, and
        # the four workers share one pipe.
        full_env = dict(os.environ, PYTHONWARNINGS="ignore")
        full_env.pop("PYTHONUNBUFFERED", None)
        full_env.pop("XPU_TIMER_JOB_TOKEN", None)
        full_env.update(env or {})
        self.lines: list[tuple[float, str, str]] = []   # (time, stream, line)
        self._cond = threading.Condition()
        self.proc = self._start((launcher() if command is None else command) + args, full_env, command is None)
        self._pumps = [threading.Thread(target=self._pump, args=(name, stream), daemon=True)
                       for name, stream in (("out", self.proc.stdout), ("err", self.proc.stderr))]
        for pump in self._pumps:
            pump.start()

    def _start(self, argv: list[str], env: dict, ours: bool):
        """The process, Popen-like, its stdout and stderr binary streams, in a
        session of its own; ``ours``: ``argv`` is the launcher's (not a
        ``command`` that replaces it)."""
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def _pump(self, name, stream) -> None:
        for raw in iter(stream.readline, b""):
            with self._cond:
                self.lines.append((time.time(), name, raw.decode("utf-8", "replace").rstrip()))
                self._cond.notify_all()

    def wait_line(self, pattern: str, timeout: float) -> tuple[float, str] | None:
        """First line matching ``pattern`` (regex) and when it arrived."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for when, _, line in self.lines:
                    if regex.search(line):
                        return when, line
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._more_coming()):
                    return None
                self._cond.wait(min(left, 0.2))

    def _more_coming(self) -> bool:
        return not (self.proc.stdout.closed or self.proc.stderr.closed)

    def matching(self, pattern: str, before: float | None = None) -> list[str]:
        """Lines matching ``pattern`` (regex); with ``before`` (a time.time()),
        only those that came before it."""
        regex = re.compile(pattern)
        with self._cond:
            return [line for when, _, line in self.lines
                    if regex.search(line) and (before is None or when < before)]

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        # The last lines: each pump ends at EOF, as soon as every process that
        # holds the pipes has exited (was: a fixed 0.2 s, on every job of the
        # suite). One that outlives the launcher gets a second at most.
        deadline = time.monotonic() + 1.0
        for pump in self._pumps:
            pump.join(max(0.0, deadline - time.monotonic()))
        return code

    def output(self) -> str:
        with self._cond:
            return "\n".join(f"[{s}] {line}" for _, s, line in self.lines)

    def kill(self) -> None:
        """Teardown: the launcher and everything in its session."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
        self.proc.wait(10)
