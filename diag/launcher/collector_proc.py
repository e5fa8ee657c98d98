"""Start and stop the node-0 collector subprocess (``python -m diag.collector``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from diag.common import envnames, options
from diag.common.children import tie_to_this_process


def collector_argv(config, address_file: str, listen: str | None = None) -> list[str]:
    """The collector's command line: its own settings plus what the launcher
    forwards (options.TO_COLLECTOR), written back through the one spec.
    ``listen``: where to bind, if not config.collector_listen() (a restart:
    the address the first one bound)."""
    own = {"listen": listen or config.collector_listen(), "job_id": config.job_id,
           "address_file": address_file}
    return (options.to_argv((options.LISTEN, options.JOB_ID, options.ADDRESS_FILE), own)
            + options.to_argv(options.TO_COLLECTOR, config))


def argv_problem(config) -> str | None:
    """Why the collector would refuse the command line ``start`` gives it, or
    None. The launcher's own values go through the collector's parser here,
    before anything starts: a disagreement is the launcher's error, said once,
    and never a job that runs on without hang detection."""
    from diag.collector import config as collector_config
    argv = collector_argv(config, "collector.addr")
    try:
        collector_config.parse_args(argv, {envnames.JOB_TOKEN: config.job_token or "token"})
    except options.ConfigError as exc:
        return (f"the collector would refuse what the launcher passes it ({exc}); "
                f"this is a bug in xpu-diag, please report it")
    return None


class CollectorError(RuntimeError):
    """The collector did not come up; the message is one line. ``status`` is
    its exit status (2: it refused its settings and said why), or None."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def start(config, token: str, workdir: str, env: dict, listen: str | None = None,
          stopping=lambda: False) -> tuple[subprocess.Popen, str]:
    """Start it and wait until it serves; returns (process, "host:port").
    ``listen``: as for collector_argv; ``stopping()`` true gives up the wait
    (CollectorError) and stops it.

    Its stderr is the launcher's, so its HANG lines reach the user directly.
    """
    address_file = os.path.join(workdir, "collector.addr")
    try:
        os.unlink(address_file)   # a dead predecessor's: the wait is for this one's
    except FileNotFoundError:
        pass
    argv = [sys.executable, "-m", "diag.collector", *collector_argv(config, address_file, listen)]
    # SIGTERM when the launcher dies, SIGKILL included (the collector ties
    # itself at start: children.die_with_launcher): its orderly stop removes
    # the access file (which holds the token) from the timeline path.
    child_env = tie_to_this_process({**env, envnames.JOB_TOKEN: token})
    proc = subprocess.Popen(argv, env=child_env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc, _wait_for_address(proc, address_file, stopping)
    except BaseException:  # also a stop signal while waiting: no orphan collector
        stop(proc)
        raise


def _wait_for_address(proc: subprocess.Popen, address_file: str, stopping=lambda: False) -> str:
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        if stopping():
            raise CollectorError("the launcher is stopping")
        if os.path.exists(address_file):
            with open(address_file) as f:
                address = f.read().strip()
            if address:
                return address
        if proc.poll() is not None:
            raise CollectorError(f"the collector exited at start with status {proc.returncode}",
                                 proc.returncode)
        time.sleep(0.05)
    raise CollectorError("the collector did not start serving within 60 s")


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; never raises."""
    try:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    except Exception:
        pass
