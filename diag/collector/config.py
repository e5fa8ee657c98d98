"""Command line of ``python -m diag.collector``: ``parse_args(argv) -> Config``.

Parsing is pure (no file system, no sockets); ``main`` checks that the
timeline path is writable before it binds. Every error is one line that names
the option and the fix.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from typing import Mapping, Sequence

from diag.common.atomic import probe_writable_dir
from diag.common.units import UnitError, parse_duration, parse_size

TOKEN_ENV = "XPU_TIMER_JOB_TOKEN"
HANG_ACTIONS = ("report", "kill")
# The agent reports about once a second; three missed reports plus slack for a
# busy node before its ranks count as silent.
DEFAULT_SILENT_AFTER_S = 3 * 1.0 + 2.0
_JOB_ID_KEEP = re.compile(r"[^A-Za-z0-9._-]")


class ConfigError(ValueError):
    """A bad option; the message is one user-facing line naming it."""


def sanitize_job_id(job_id: str) -> str:
    """Keep only ``[A-Za-z0-9._-]`` (docs/event-dir.md); raises ConfigError
    when nothing usable is left, so a job id can never be ``..`` or empty."""
    clean = _JOB_ID_KEEP.sub("", job_id)
    if clean.strip(".") == "":
        raise ConfigError(f"--job-id: {job_id!r} has no usable characters; use letters, digits, '.', '_' or '-'")
    return clean


def parse_listen(text: str, option: str = "--listen") -> tuple[str, int]:
    """``"127.0.0.1:0"`` / ``"[::1]:5000"`` -> (host, port); port 0 means any free port."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{option}: {text!r} is not HOST:PORT; use e.g. 127.0.0.1:0 or 0.0.0.0:50051")
    if host.startswith("[") != host.endswith("]"):
        raise ConfigError(f"{option}: {text!r} has an unbalanced IPv6 bracket; use e.g. [::1]:0")
    return host, int(port)


@dataclasses.dataclass(frozen=True)
class Config:
    """Validated collector settings (durations in seconds, sizes in bytes)."""

    job_id: str
    token: str
    listen: str = "127.0.0.1:0"
    timeline_path: str = "/root/timeline"
    hang_timeout_s: float = 300.0
    hang_action: str = "report"
    address_file: str | None = None
    silent_after_s: float = DEFAULT_SILENT_AFTER_S
    dump_timeout_s: float = 60.0
    max_dump_bytes: int = 64 << 20
    max_agents: int = 4096
    eval_interval_s: float = 0.5
    stats_interval_s: float = 60.0

    def __post_init__(self) -> None:
        parse_listen(self.listen)
        sanitize_job_id(self.job_id)
        if not self.token:
            raise ConfigError(f"no job token: set {TOKEN_ENV} (xpu_timer_launch sets it for its children)")
        if self.hang_action not in HANG_ACTIONS:
            raise ConfigError(f"--hang-action: {self.hang_action!r} is not one of {', '.join(HANG_ACTIONS)}")
        for option, value in (("--hang-timeout", self.hang_timeout_s), ("--silent-after", self.silent_after_s),
                              ("--dump-timeout", self.dump_timeout_s), ("eval interval", self.eval_interval_s),
                              ("--stats-interval", self.stats_interval_s)):
            if not value > 0:
                raise ConfigError(f"{option}: {value!r} must be a positive duration, e.g. 30s")
        if self.max_agents < 1:
            raise ConfigError(f"--max-agents: {self.max_agents!r} must be at least 1")
        if not self.timeline_path:
            raise ConfigError("--timeline-path: must not be empty; use e.g. /root/timeline")

    @property
    def safe_job_id(self) -> str:
        """The job id as it appears in paths."""
        return sanitize_job_id(self.job_id)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit 2
        raise ConfigError(message)


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m diag.collector", description="xpu-diag job-wide collector (gRPC server)")
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to bind; port 0 picks a free one")
    p.add_argument("--timeline-path", default="/root/timeline", help="root of the event directories")
    p.add_argument("--hang-timeout", default="300s", help="in-flight age that counts as hung (e.g. 300, 30s, 5m)")
    p.add_argument("--job-id", required=True, help="job id (torchrun --rdzv-id); [A-Za-z0-9._-] kept in paths")
    p.add_argument("--hang-action", default="report", help="report | kill (kill ends the workers after the dumps)")
    p.add_argument("--address-file", default=None, help="write the bound HOST:PORT here once serving")
    p.add_argument("--silent-after", default=f"{DEFAULT_SILENT_AFTER_S:g}s",
                   help="an agent with no report for this long is silent")
    p.add_argument("--dump-timeout", default="60s", help="with --hang-action kill, kill after this even if dumps are missing")
    p.add_argument("--max-dump-size", default="64M", help="largest accepted stack dump file")
    p.add_argument("--max-agents", default="4096", help="most agents connected at once")
    p.add_argument("--stats-interval", default="60s", help="log an ingest-rate line this often")
    return p


def parse_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Config:
    """Parse and validate; raises ConfigError (one line) on any bad option.

    ``env`` defaults to ``os.environ``; only XPU_TIMER_JOB_TOKEN is read.
    """
    env = os.environ if env is None else env
    ns = _build_parser().parse_args(list(argv))
    try:
        max_agents = int(ns.max_agents)
    except ValueError:
        raise ConfigError(f"--max-agents: {ns.max_agents!r} is not an integer") from None
    try:
        return Config(
            job_id=ns.job_id, token=env.get(TOKEN_ENV, ""), listen=ns.listen,
            timeline_path=ns.timeline_path,
            hang_timeout_s=parse_duration(ns.hang_timeout, "--hang-timeout"),
            hang_action=ns.hang_action, address_file=ns.address_file,
            silent_after_s=parse_duration(ns.silent_after, "--silent-after"),
            dump_timeout_s=parse_duration(ns.dump_timeout, "--dump-timeout"),
            max_dump_bytes=parse_size(ns.max_dump_size, "--max-dump-size"),
            max_agents=max_agents, stats_interval_s=parse_duration(ns.stats_interval, "--stats-interval"))
    except UnitError as exc:
        raise ConfigError(str(exc)) from None


def check_timeline_writable(path: str) -> None:
    """Create ``path`` if needed and prove it is writable; raises ConfigError."""
    try:
        probe_writable_dir(path)
    except OSError as exc:
        raise ConfigError(f"--timeline-path: cannot write in {path!r}: {exc.strerror or exc}; "
                          f"pick a writable directory") from None
