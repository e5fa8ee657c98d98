"""``xpu_timer_launch`` command line: ``parse_args(argv, env) -> Config``.

Our own options sit among torchrun's, before the training script; everything
else goes to torch.distributed.run verbatim. torchrun's own parser (with our
options added to it) finds where its options end, so nothing is guessed.
Pure: reads no files, creates nothing and starts nothing; errors are one-line ``ConfigError``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import uuid
from typing import Mapping, Sequence

from diag.common import options
from diag.common.options import ConfigError  # noqa: F401  (re-exported: the one ConfigError)

PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")
NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")
MAX_NPROC = 1024   # workers per node; more is a typo, not a machine
_JOB_ID_DROP = re.compile(r"[^A-Za-z0-9._-]")
OWN_FLAGS = options.flags_taking_value(options.LAUNCHER)


@dataclasses.dataclass(frozen=True)
class Config:
    torchrun_argv: list[str]          # what torch.distributed.run gets, verbatim
    job_id: str
    node_rank: int
    nnodes_max: int
    rdzv_host: str                    # where node 0's collector listens when nnodes > 1
    rdzv_port: int
    nnodes_min: int = 1               # --nnodes MIN:MAX's MIN (recover leaves a node out only above it)
    unbuffered: bool = False          # `python -u train.py`
    script: str = ""                  # the training script, module (-m) or command (--no-python)
    script_kind: str = "file"         # "file", "module" or "command"
    rdzv_backend: str = "static"      # torchrun's, "c10d" under --standalone
    restarts: bool = False            # torchrun's --max-restarts is 1 or more
    # One field per option in options.LAUNCHER, named as its dest; a value is
    # the option's default (declared once, in diag/common/options.py).
    hang_timeout_s: float = options.default(options.HANG_TIMEOUT)
    idle_timeout_s: float = options.default(options.IDLE_TIMEOUT)       # no op started or finished anywhere, none in flight
    verdicts: str = options.default(options.VERDICTS)                   # evidence | timeout (diag/hang/decide.py)
    blocked_after_s: float = options.default(options.BLOCKED_AFTER)
    timeline_path: str = options.default(options.TIMELINE_PATH)
    collector: str | None = None      # HOST:PORT of an existing collector
    hang_action: str = options.default(options.HANG_ACTION)
    no_hook: bool = False
    link_plugin: bool = False         # asked for by name (it is the default)
    no_link_plugin: bool = False      # NCCL_PROFILER_PLUGIN is not pointed at ours (docs/link.md)
    fault_list: str | None = None
    fault_list_max_age: float = options.default(options.FAULT_LIST_MAX_AGE)
    rank_order: str | None = None       # netcheck --rank-order's file (diag/launcher/rankorder.py)
    rank_order_note: str = ""           # the one line saying what --rank-order did
    hook_time_every: int | None = None  # the hook device-times 1 call in N (its default: 8)
    hook_completion: str | None = None  # how the hook sees unsampled collectives complete
    report_interval: float = options.default(options.REPORT_INTERVAL)        # the agent's
    timeline_window_s: float = options.default(options.TIMELINE_WINDOW)     # the agent's timeline ring (docs/timeline.md)
    perf_window_s: float = options.default(options.PERF_WINDOW)
    perf_step: str = options.default(options.PERF_STEP)
    metrics_port: int | None = None
    metrics_addr: str = options.default(options.METRICS_ADDR)
    collector_metrics_port: int | None = None   # node 0's collector (docs/metrics.md "Alerts")
    slow_threshold: float = options.default(options.SLOW_THRESHOLD)
    slow_action: str = options.default(options.SLOW_ACTION)
    ingest_procs: int = options.default(options.INGEST_PROCS)               # node 0's collector: --ingest-procs (docs/collector.md)
    nodes_per_relay: int = options.default(options.NODES_PER_RELAY)            # node 0's collector: --nodes-per-relay (docs/collector.md)
    gpu_sample_interval_s: float = options.default(options.GPU_SAMPLE_INTERVAL)  # the agent's NVML sampling (docs/gpu.md); 0: off
    nvml_replay: str | None = None      # the agent's NVML answers from a recording
    # Read in the workers (env only; None: unset, the reader's default). The
    # launcher exports them in the one spelling each reader takes.
    ring_capacity: int | None = None
    tracer_disable: bool | None = None
    tracer_cpp_collectives: bool | None = None
    host_tracing_func: str | None = None
    hook_disable: bool | None = None
    hook_poll_us: int | None = None
    hook_count_ms: int | None = None
    dump_tools: tuple[str, ...] | None = None   # the agent's; None: dumps.default_tools()
    ckpt_persist_every: options.Every = options.default(options.CKPT_PERSIST_EVERY)   # docs/recovery.md
    ckpt_dir: str | None = None        # None: <timeline_path>/<job_id>/ckpt
    job_token: str | None = dataclasses.field(default=None, repr=False)  # None: make one

    @property
    def starts_collector(self) -> bool:
        return self.collector is None and self.node_rank == 0

    def collector_listen(self) -> str:
        """Where this node's collector binds: loopback for one node, else the
        rendezvous host on the rendezvous port + 1 (what the other nodes dial)."""
        if self.nnodes_max <= 1:
            return "127.0.0.1:0"
        return f"{self.rdzv_host}:{self.rdzv_port + 1}"


# --help's sections, in order (docs/launcher.md has the same ones); None: every other option.
HELP_GROUPS: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("hang detection", ("--hang-timeout", "--idle-timeout", "--verdicts", "--blocked-after", "--hang-action", "--timeline-path", "--collector")),
    ("recovery (--hang-action recover; docs/recovery.md)", ("--ckpt-persist-every", "--ckpt-dir")),
    ("performance and metrics", ("--perf-window", "--perf-step", "--slow-threshold", "--slow-action",
                                 "--metrics-port", "--metrics-addr", "--collector-metrics-port",
                                 "--timeline-window", "--gpu-sample-interval")),
    ("network checks (netcheck's output)", ("--fault-list", "--fault-list-max-age", "--rank-order")),
    ("advanced", None),
)
# Accepted, not shown: --link-plugin asks for the default (scripts of before still run).
HIDDEN_FLAGS = {"--link-plugin"}


def torchrun_parser() -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser
    parser = get_args_parser()
    parser.prog = "xpu_timer_launch"
    parser.allow_abbrev = False  # an abbreviated own option would leak to torchrun
    parser.usage = "xpu_timer_launch [xpu-diag options] [torchrun options] train.py [args]"
    parser.description = ("torchrun with hang detection: the same options, plus ours "
                          "(docs/launcher.md). torchrun's own options follow ours.")
    ours = []
    for i, (title, names) in enumerate(HELP_GROUPS):
        group = parser.add_argument_group(f"xpu-diag options: {title}" + (
            " (defaults in parentheses, env in brackets)" if i == 0 else ""))
        ours.append(group)
        if names is None:   # the rest: an option added to LAUNCHER but to no group still shows
            grouped = {n for _, ns in HELP_GROUPS if ns for n in ns}
            chosen = [o for o in options.LAUNCHER if o.flag and o.flag not in grouped]
            group.add_argument("--version", action="version", version=version_line())
        else:
            by_flag = {o.flag: o for o in options.LAUNCHER}
            chosen = [by_flag[n] for n in names]
        options.add_arguments(group, chosen, prefix="xpu_")
    for action in parser._actions:
        if HIDDEN_FLAGS.intersection(action.option_strings):
            action.help = argparse.SUPPRESS
    # Ours first in --help: torchrun's forty options would otherwise bury them.
    for group in reversed(ours):
        parser._action_groups.remove(group)
        parser._action_groups.insert(0, group)
    for other in parser._action_groups[1:]:
        if other.title in ("options", "optional arguments"):
            other.title = "torchrun options (passed to torch.distributed.run unchanged)"
    return options.one_line(parser, _rewrite)  # no usage dump, no exit from inside parsing


def version_line() -> str:
    from diag import __version__
    return f"xpu_timer_launch (xpu-diag) {__version__}"


def _rewrite(message: str) -> str:
    if "training_script" in message:
        return "no training script given; usage: xpu_timer_launch [options] train.py [args]"
    return message


def parse_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Config:
    env = os.environ if env is None else env
    argv = list(argv)
    ns = torchrun_parser().parse_args(argv)
    # Everything after the script is REMAINDER, verbatim: that fixes the split.
    script_at = len(argv) - len(ns.training_script_args) - 1
    prefix = _strip_own_options(argv[:script_at])
    own = options.resolve(ns, options.LAUNCHER, env, prefix="xpu_")
    script, rest, unbuffered, module = _script(ns.training_script, list(ns.training_script_args))
    if module and "-m" not in prefix and "--module" not in prefix:
        prefix.append("--module")
    kind = "module" if (module or ns.module) else "command" if ns.no_python else "file"
    return _build(ns, prefix + [script] + rest, own, env, unbuffered, script, kind)


def _strip_own_options(prefix: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(prefix):
        token = prefix[i]
        name = token.split("=", 1)[0]
        if name in OWN_FLAGS:
            i += 1 if ("=" in token or not OWN_FLAGS[name]) else 2
            continue
        out.append(token)
        i += 1
    return out


def _script(script: str, rest: list[str]):
    """Strip a leading ``python``; ``python -m mod`` -> module mode. Returns
    (script, args, unbuffered, module)."""
    if not PYTHON_NAME.match(os.path.basename(script)) or not rest:
        return script, rest, False, False
    unbuffered = False
    while rest and rest[0] in ("-u", "-B"):
        unbuffered |= rest.pop(0) == "-u"
    if rest and rest[0] == "-m":
        if len(rest) < 2:
            raise ConfigError("python -m: no module name given")
        return rest[1], rest[2:], unbuffered, True
    if not rest or rest[0].startswith("-"):
        bad = rest[0] if rest else "(nothing)"
        raise ConfigError(f"python option {bad!r} is not supported here; put the script "
                          f"first, or set the matching PYTHON* environment variable")
    return rest[0], rest[1:], unbuffered, False


def _build(ns, torchrun_argv, own, env, unbuffered, script, script_kind) -> Config:
    """Checks that need more than one option's text (the parsers did the rest).
    Whether --timeline-path can be written, and the script exists, is tried by
    the runner (it reads files), before anything starts."""
    _check_nproc(ns.nproc_per_node)
    nnodes_max = _nnodes_max(ns.nnodes)
    _check_recover(own, ns)
    if own.get("ingest_procs") and own.get("nodes_per_relay"):
        raise ConfigError(f"--ingest-procs {own['ingest_procs']} and --nodes-per-relay {own['nodes_per_relay']}: "
                          f"choose one (relays merge the reports before the collector; docs/collector.md)")
    if own.get("link_plugin") and own.get("no_link_plugin"):
        raise ConfigError("--link-plugin and --no-link-plugin: choose one (the plugin is on by default; "
                          "docs/link.md)")
    rdzv_host, rdzv_port = _rendezvous(ns)
    if nnodes_max > 1 and own.get("collector") is None:
        _check_collector_listen(rdzv_host, rdzv_port)
    node_rank, note = int(ns.node_rank), ""
    if own.get("rank_order"):
        from diag.launcher import rankorder
        torchrun_argv, node_rank, note = rankorder.apply(own["rank_order"], torchrun_argv, node_rank)
    return Config(
        torchrun_argv=torchrun_argv, job_id=_job_id(ns, env, rdzv_host, rdzv_port, nnodes_max),
        node_rank=node_rank, rank_order_note=note, nnodes_max=nnodes_max, rdzv_host=rdzv_host,
        nnodes_min=_nnodes_min(ns.nnodes, nnodes_max),
        rdzv_backend="c10d" if getattr(ns, "standalone", False) else str(ns.rdzv_backend),
        restarts=_restarts(ns) >= 1,
        rdzv_port=rdzv_port, unbuffered=unbuffered, script=script, script_kind=script_kind, **own)


def _check_collector_listen(host: str, port: int) -> None:
    """Node 0's collector listens on the rendezvous host, port + 1, and parses
    that as --listen: what it would refuse is the user's rendezvous, said here."""
    if port + 1 > 65535:
        raise ConfigError(f"--master-port/--rdzv-endpoint: port {port} leaves no port for the "
                          f"collector, which listens on the rendezvous port + 1; use a port below 65535")
    try:
        options.LISTEN.parse(f"{host}:{port + 1}", "--listen")
    except ConfigError:
        raise ConfigError(f"--master-addr/--rdzv-endpoint: {host!r} is not a host the collector can "
                          f"listen on (it binds the rendezvous host, port + 1); use e.g. 10.0.0.1 "
                          f"or [fd00::1]") from None


def _check_nproc(value: str) -> None:
    """What torchrun's determine_local_world_size takes, said in one line
    before torchrun raises a ValueError at start."""
    fix = f"use {', '.join(NPROC_WORDS)} or a number from 1 to {MAX_NPROC}"
    text = str(value).strip()
    if re.fullmatch(r"[0-9]{1,6}", text) and 1 <= int(text) <= MAX_NPROC:
        return
    if text not in NPROC_WORDS:
        raise ConfigError(f"--nproc-per-node: {value!r} is not a worker count; {fix}")
    import torch
    if text == "gpu" and not torch.cuda.is_available():
        raise ConfigError(f"--nproc-per-node: 'gpu' but torch sees no CUDA GPU here; {fix}")
    if text == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise ConfigError(f"--nproc-per-node: 'xpu' but torch sees no XPU here; {fix}")


def _nnodes_max(nnodes: str) -> int:
    try:
        return int(str(nnodes).split(":")[-1])
    except ValueError:
        raise ConfigError(f"--nnodes: {nnodes!r} is not N or MIN:MAX") from None


def _nnodes_min(nnodes: str, nnodes_max: int) -> int:
    low = str(nnodes).split(":")[0]
    return int(low) if ":" in str(nnodes) and low.strip().isdigit() else nnodes_max


def _check_recover(own: dict, ns) -> None:
    """--hang-action recover restarts through torchrun's --max-restarts: with
    none, the job would only end after its last words."""
    if own.get("hang_action") != "recover":
        return
    if _restarts(ns) < 1:
        raise ConfigError("--hang-action recover: torchrun's --max-restarts is 0, so nothing would restart "
                          "after the kill; add --max-restarts 1 (or more)")


def _restarts(ns) -> int:
    try:
        return int(ns.max_restarts)
    except (TypeError, ValueError):
        raise ConfigError(f"--max-restarts: {ns.max_restarts!r} is not a whole number; use e.g. 1") from None


def _rendezvous(ns) -> tuple[str, int]:
    if ns.rdzv_endpoint:
        host, _, port = ns.rdzv_endpoint.rpartition(":")
        if host and re.fullmatch(r"[0-9]{1,5}", port):
            return host, int(port)
        return ns.rdzv_endpoint, 29400
    return ns.master_addr or "127.0.0.1", int(ns.master_port or 29500)


def _job_id(ns, env, rdzv_host, rdzv_port, nnodes_max) -> str:
    """torchrun's --rdzv-id, else TORCHELASTIC_RUN_ID, else one we make (the same
    on every node of a multi-node job: derived from the rendezvous address)."""
    raw = ns.rdzv_id if ns.rdzv_id and ns.rdzv_id != "none" else env.get("TORCHELASTIC_RUN_ID")
    if not raw:
        raw = (f"job-{rdzv_host}-{rdzv_port}" if nnodes_max > 1
               else f"job-{uuid.uuid4().hex[:8]}")
    clean = _JOB_ID_DROP.sub("", raw).strip(".")
    return clean or f"job-{uuid.uuid4().hex[:8]}"
