"""Command line of ``python -m diag.collector``: ``parse_args(argv) -> Config``.

Parsing is pure (no file system, no sockets); ``main`` checks that the
timeline path is writable before it binds. Every error is one line that names
the option and the fix.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping, Sequence

from diag.common import options
from diag.common.atomic import probe_writable_dir
from diag.common.collector_access import TOKEN_ENV, sanitize_job_id
from diag.common.options import DEFAULT_SILENT_AFTER_S, ConfigError

__all__ = ["Config", "ConfigError", "DEFAULT_SILENT_AFTER_S", "TOKEN_ENV", "parse_args", "to_argv"]


def parse_listen(text: str, option: str = "--listen") -> tuple[str, int]:
    """``"127.0.0.1:0"`` / ``"[::1]:5000"`` -> (host, port); port 0 means any free port."""
    host, _, port = options.LISTEN.parse(text, option).rpartition(":")
    return host, int(port)


@dataclasses.dataclass(frozen=True)
class Config:
    """Validated collector settings (durations in seconds, sizes in bytes)."""

    job_id: str
    token: str
    # One field per option in options.COLLECTOR, named as its dest; each
    # default is the option's (declared once, in diag/common/options.py).
    listen: str = options.default(options.LISTEN)
    timeline_path: str = options.default(options.TIMELINE_PATH)
    hang_timeout_s: float = options.default(options.HANG_TIMEOUT)
    idle_timeout_s: float = options.default(options.IDLE_TIMEOUT)
    verdicts: str = options.default(options.VERDICTS)
    blocked_after_s: float = options.default(options.BLOCKED_AFTER)
    hang_action: str = options.default(options.HANG_ACTION)
    address_file: str | None = options.default(options.ADDRESS_FILE)
    silent_after_s: float = options.default(options.SILENT_AFTER)
    dump_timeout_s: float = options.default(options.DUMP_TIMEOUT)
    last_words_timeout_s: float = options.default(options.LAST_WORDS_TIMEOUT)
    max_dump_bytes: int = options.default(options.MAX_DUMP_SIZE)
    max_agents: int = options.default(options.MAX_AGENTS)
    ingest_procs: int = options.default(options.INGEST_PROCS)
    nodes_per_relay: int = options.default(options.NODES_PER_RELAY)
    eval_interval_s: float = 0.5        # the watchdog's tick; no option (tests shorten it)
    stats_interval_s: float = options.default(options.STATS_INTERVAL)
    perf_window_s: float = options.default(options.PERF_WINDOW)
    slow_threshold: float = options.default(options.SLOW_THRESHOLD)
    slow_action: str = options.default(options.SLOW_ACTION)
    collector_metrics_port: int | None = options.default(options.COLLECTOR_METRICS_PORT)  # docs/metrics.md "Alerts"
    metrics_addr: str = options.default(options.METRICS_ADDR)

    def __post_init__(self) -> None:
        # Each value again through its option's own parser, bounds included, so
        # a Config built in code is held to what the command line is.
        for opt in options.COLLECTOR:
            value = getattr(self, opt.dest)
            if value is not None:
                opt.parse(opt.format(value), opt.flag)
        sanitize_job_id(self.job_id)
        if not self.token:
            raise ConfigError(f"no job token: set {TOKEN_ENV} (xpu_timer_launch sets it for its children)")
        options.job_token(self.token, TOKEN_ENV)
        if self.ingest_procs and self.nodes_per_relay:
            raise ConfigError(f"--ingest-procs {self.ingest_procs} and --nodes-per-relay {self.nodes_per_relay}: "
                              f"choose one (relays merge the reports before the collector; docs/collector.md)")
        if not self.eval_interval_s > 0:
            raise ConfigError(f"eval interval: {self.eval_interval_s!r} must be a positive duration")

    @property
    def safe_job_id(self) -> str:
        """The job id as it appears in paths."""
        return sanitize_job_id(self.job_id)


def _build_parser():
    p = options.parser("python -m diag.collector", "xpu-diag job-wide collector (gRPC server)")
    options.add_arguments(p, options.COLLECTOR)
    return p


def parse_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Config:
    """Parse and validate; raises ConfigError (one line) on any bad option.

    ``env`` defaults to ``os.environ``; only XPU_TIMER_JOB_TOKEN is read (the
    options' own variables are the launcher's business: it passes flags).
    """
    env = os.environ if env is None else env
    ns = _build_parser().parse_args(list(argv))
    if ns.job_id is None:
        raise ConfigError("the following arguments are required: --job-id")
    values = options.resolve(ns, options.COLLECTOR)
    return Config(token=env.get(TOKEN_ENV, ""), **values)


def to_argv(config: Config) -> list[str]:
    """The command line that ``parse_args`` turns back into ``config`` (with
    the token in the environment)."""
    return options.to_argv(options.COLLECTOR, config)


def check_timeline_writable(path: str) -> None:
    """Create ``path`` if needed and prove it is writable; raises ConfigError."""
    try:
        probe_writable_dir(path)
    except OSError as exc:
        raise ConfigError(f"--timeline-path: cannot write in {path!r}: {exc.strerror or exc}; "
                          f"pick a writable directory") from None
