"""Command line -> Config. Pure: parse_args(argv, env) reads nothing else.

Rendezvous settings come from flags or, as under torchrun, from the
environment (WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT, LOCAL_RANK,
LOCAL_WORLD_SIZE, TORCHELASTIC_USE_AGENT_STORE); flags win.
XPU_TIMER_NODE_NAME names this node, as for xpu_timer_launch --fault-list.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from diag.common import options
from diag.common.options import ConfigError  # noqa: F401  (re-exported: the one ConfigError)
from diag.common.units import UnitError, parse_duration, parse_size

FORMATS = ("table", "json", "slurm", "taints")
CPU_DEFAULT_SIZE = 4 << 20
GPU_DEFAULT_SIZE = 1 << 30




@dataclass
class Rendezvous:
    """Who is in the check and how to reach node rank 0 (flags or torchrun's environment)."""

    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29560
    agent_store: bool = False               # torchrun's agent already serves the store
    local_rank: int = 0
    local_world_size: int = 1
    node_name: str = ""
    host_rank: int = 0                      # this host's node rank (GROUP_RANK under --nproc-per-node)
    slurm_nodes: list[str] = field(default_factory=list)   # SLURM_JOB_NODELIST, expanded: node rank -> name
    spawn_dir: str = ""                     # set by --nproc-per-node for its children (spawn.py)
    nproc_per_node: int = 1                 # >1: start that many local processes (one per GPU) via torchrun
    backend: str = "auto"                   # auto | gloo | nccl
    iface: str = ""
    join_timeout: float = 120.0


@dataclass
class Measure:
    """What each pair runs, and the bounds on it."""

    size: int | None = None                 # None: 1 GiB on GPU, 4 MiB on CPU
    warmup: int = 2
    iters: int = 5
    timeout: float = 60.0
    deadline: float = 300.0                 # the whole check; nodes not measured by then are unknown
    compute: str = "auto"                   # auto (GPU only) | on | off
    max_rounds: int = 10


@dataclass
class Thresholds:
    """When a figure fails (rules.py; switchbox.py for the last two)."""

    min_busbw: float | None = None          # GB/s
    profile: str = "auto"
    rel_ratio: float = 0.5
    mad_z: float = 3.5
    min_bandwidth: float = 10000.0          # MB/s
    min_channels: int = 2


@dataclass
class Output:
    """What is printed and written."""

    output: str | None = None
    format: str = "table"
    taint_key: str = "xpu-diag/faulty"
    progress: bool = True
    verbose: bool = False
    rank_order: str | None = None           # write a topology-aware rank order here
    topology: str | None = None             # switch map that overrides the measured grouping
    fault_list: str | None = None           # preflight: refuse this node when this list names it


@dataclass
class Switchbox:
    box_pairs: list[tuple[int, int]] | None = None
    switchbox_size: int = 256 << 20
    nvml_replay: str | None = None


@dataclass
class Config:
    """One netcheck run, by concern: ``cfg.rdzv``, ``cfg.measure``, ``cfg.thresholds``, ``cfg.out``, ``cfg.box``."""

    mode: str = "check"                     # check | preflight
    pairwise: bool = True
    switchbox: bool = False
    rdzv: Rendezvous = field(default_factory=Rendezvous)
    measure: Measure = field(default_factory=Measure)
    thresholds: Thresholds = field(default_factory=Thresholds)
    out: Output = field(default_factory=Output)
    box: Switchbox = field(default_factory=Switchbox)

    def validate(self) -> None:
        checks = [
            (self.rdzv.nnodes >= 1, "--nnodes", f"{self.rdzv.nnodes} must be >= 1"),
            (0 <= self.rdzv.node_rank < self.rdzv.nnodes, "--node-rank", f"{self.rdzv.node_rank} must be in [0, --nnodes)"),
            (0 < self.rdzv.master_port < 65536, "--master-port", f"{self.rdzv.master_port} is not a TCP port"),
            (self.measure.iters >= 1, "--iters", f"{self.measure.iters} must be >= 1"),
            (self.measure.warmup >= 0, "--warmup", f"{self.measure.warmup} must be >= 0"),
            (0 < self.thresholds.rel_ratio < 1, "--rel-ratio", f"{self.thresholds.rel_ratio} must be between 0 and 1"),
            (self.thresholds.mad_z > 0, "--mad-z", f"{self.thresholds.mad_z} must be > 0"),
            (self.thresholds.min_busbw is None or self.thresholds.min_busbw > 0, "--min-busbw", f"{self.thresholds.min_busbw} must be > 0 GB/s"),
            (self.thresholds.min_bandwidth > 0, "--min-bandwidth", f"{self.thresholds.min_bandwidth} must be > 0 MB/s"),
            (self.thresholds.min_channels >= 0, "--min-channels", f"{self.thresholds.min_channels} must be >= 0"),
            (self.measure.max_rounds >= 1, "--max-rounds", f"{self.measure.max_rounds} must be >= 1"),
            (self.rdzv.nproc_per_node >= 1, "--nproc-per-node", f"{self.rdzv.nproc_per_node} must be >= 1"),
        ]
        for ok, option, why in checks:
            if not ok:
                raise ConfigError(f"{option}: {why}")
        if self.rdzv.nproc_per_node > 1 and (self.mode != "check" or not self.pairwise):
            raise ConfigError("--nproc-per-node: only for the pairwise check (give --nnodes ...)")
        if self.mode == "check" and self.pairwise and self.rdzv.nnodes * self.rdzv.nproc_per_node < 2:
            raise ConfigError("--nnodes: the pairwise check needs at least 2 nodes "
                              "(give --nnodes/--node-rank/--master-addr, run under torchrun, or use --switchbox-check)")


def _box_pair(text: str) -> tuple[int, int]:
    a, sep, b = text.partition(":")
    try:
        pair = (int(a), int(b))
    except ValueError:
        pair = None
    if not sep or pair is None or pair[0] == pair[1] or min(pair) < 0:
        raise ConfigError(f"--box-pairs: {text!r} is not a pair of two GPU indices like 0:1")
    return pair


CHECK_TEXT = "Pairwise node, GPU and switchbox checks; writes a fault list."
PREFLIGHT_TEXT = ("The job hook (Slurm Prolog / HealthCheckProgram, k8s init container): switchbox and "
                  "NVML health on this node, then the pairwise check when peers are given (--nnodes ... "
                  "or torchrun's environment). Exit 0: this node is healthy; 1: this node is faulty; "
                  "2: bad command line; 3: the check could not run. docs/preflight/README.md has examples.")
EXIT_TEXT = ("exit status: 0 healthy, 1 a node is faulty, 2 bad command line, "
             "3 the check could not run, 4 --deadline passed with nodes unknown")


def _parser(mode: str = "check") -> argparse.ArgumentParser:
    from diag import __version__

    preflight = mode == "preflight"
    p = options.parser("netcheck preflight" if preflight else "netcheck",
                       PREFLIGHT_TEXT if preflight else CHECK_TEXT)
    p.epilog = None if preflight else EXIT_TEXT
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    if not preflight:
        p.add_argument("mode", nargs="?", choices=("check", "preflight"), default="check",
                       help="check (default): the pairwise check; preflight: the job hook "
                            "(netcheck preflight --help)")
    r = p.add_argument_group("rendezvous (or torchrun env)")
    r.add_argument("--nnodes", type=int, help="number of nodes (env WORLD_SIZE)")
    r.add_argument("--node-rank", type=int, help="this node's rank, 0 coordinates (env RANK)")
    r.add_argument("--master-addr", help="node rank 0's address (env MASTER_ADDR; default 127.0.0.1)")
    r.add_argument("--master-port", type=int, help="node rank 0's store port (env MASTER_PORT; default 29560)")
    r.add_argument("--nproc-per-node", type=int, default=1,
                   help="start this many local processes (one per GPU), each one 'node', as torchrun would")
    r.add_argument("--node-name", help="this node's name in the fault list (env XPU_TIMER_NODE_NAME; default hostname)")
    r.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="auto: nccl when a GPU is visible, else gloo")
    r.add_argument("--iface", default="", help="gloo: network interface to use (env GLOO_SOCKET_IFNAME; "
                                                "default: the one whose route reaches --master-addr)")
    m = p.add_argument_group("measurement")
    m.add_argument("--size", help="message size per pair test (default 1G on GPU, 4M on CPU)")
    m.add_argument("--warmup", type=int, default=2, help="untimed iterations before timing (default 2)")
    m.add_argument("--iters", type=int, default=5, help="timed iterations per test (default 5)")
    m.add_argument("--timeout", default="60s", help="deadline of every collective and node (default 60s)")
    m.add_argument("--join-timeout", default="120s", help="how long to wait for every node to join (default 120s)")
    m.add_argument("--deadline", default="5m", help="the whole check (default 5m): what is measured by then is "
                                                    "written, the rest of the nodes are unknown (exit 4)")
    m.add_argument("--compute", choices=("auto", "on", "off"), default="auto", help="GEMM check (auto: on GPU)")
    m.add_argument("--max-rounds", type=int, default=10, help="stop pinning faults after this many rounds")
    t = p.add_argument_group("thresholds")
    t.add_argument("--min-busbw", type=float, help="absolute floor, GB/s")
    t.add_argument("--profile", default="auto", help="per-SKU floors: auto, none, H100, H200")
    t.add_argument("--rel-ratio", type=float, default=0.5, help="fail under this x fleet median (default 0.5)")
    t.add_argument("--mad-z", type=float, default=3.5, help="robust z-score limit (default 3.5)")
    o = p.add_argument_group("output")
    o.add_argument("--output", help="write the fault list here (JSON, atomically)")
    o.add_argument("--format", choices=FORMATS, default="table",
                   help="table (default), json, slurm (a hostlist for sbatch --exclude), taints (kubectl)")
    o.add_argument("--taint-key", default="xpu-diag/faulty", help="--format taints: the taint key")
    o.add_argument("--rank-order", metavar="FILE", help="also measure every pair and write a topology-aware "
                   "rank order here (JSON; xpu_timer_launch --rank-order reads it)")
    o.add_argument("--topology", metavar="FILE", help="with --rank-order: JSON {hostname or address: switch} "
                   "that overrides the measured grouping")
    o.add_argument("--verbose", action="store_true", help="table: one row per measurement, not per node")
    if preflight:
        o.add_argument("--fault-list", metavar="FILE", help="exit 1 at once when this fault list (netcheck's, or "
                       "the faults.json a HANG wrote next to hang.json) names this node")
    o.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    s = p.add_argument_group("switchbox")
    if not preflight:
        s.add_argument("--switchbox-check", action="store_true", help="also check this host's GPU links")
    s.add_argument("--box-pairs", nargs="+", metavar="I:J", help="GPU pairs to test (default: every pair)")
    s.add_argument("--min-bandwidth", type=float, default=10000.0, help="MB/s for a working channel")
    s.add_argument("--min-channels", type=int, default=2, help="fail under this many working GPU pairs")
    s.add_argument("--switchbox-size", default="256M", help="bytes per GPU copy (default 256M)")
    s.add_argument("--nvml-replay", help="answer NVML queries from this recorded JSON (tests)")
    return p


def _rendezvous(ns: argparse.Namespace, env: Mapping[str, str], cfg: Config) -> None:
    def pick(flag, name, conv, default):
        if flag is not None:
            return flag
        if env.get(name):
            try:
                return conv(env[name])
            except ValueError:
                raise ConfigError(f"{name}={env[name]!r} in the environment is not valid") from None
        return default
    cfg.rdzv.nnodes = pick(ns.nnodes, "WORLD_SIZE", int, 1)
    cfg.rdzv.node_rank = pick(ns.node_rank, "RANK", int, 0)
    cfg.rdzv.master_addr = pick(ns.master_addr, "MASTER_ADDR", str, cfg.rdzv.master_addr)
    cfg.rdzv.master_port = pick(ns.master_port, "MASTER_PORT", int, cfg.rdzv.master_port)
    cfg.rdzv.local_rank = pick(None, "LOCAL_RANK", int, 0)
    cfg.rdzv.local_world_size = pick(None, "LOCAL_WORLD_SIZE", int, 1)
    cfg.rdzv.agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true" and ns.master_port is None
    cfg.rdzv.node_name = ns.node_name or env.get("XPU_TIMER_NODE_NAME", "")
    cfg.rdzv.iface = ns.iface or env.get("GLOO_SOCKET_IFNAME", "")
    rendezvous_given = ns.nnodes is not None or "WORLD_SIZE" in env
    cfg.pairwise = rendezvous_given or not ns.switchbox_check


def parse_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Config:
    """Parse and validate; raises ConfigError (one line naming the option)."""
    env = os.environ if env is None else env
    argv = list(argv)
    if argv[:1] == ["preflight"]:      # its own --help text and flags
        ns = _parser("preflight").parse_args(argv[1:])
        ns.mode, ns.switchbox_check = "preflight", True
    else:
        ns = _parser().parse_args(argv)
    cfg = Config(mode=ns.mode, switchbox=ns.switchbox_check or ns.mode == "preflight",
                 rdzv=Rendezvous(backend=ns.backend, nproc_per_node=ns.nproc_per_node),
                 measure=Measure(warmup=ns.warmup, iters=ns.iters, compute=ns.compute, max_rounds=ns.max_rounds),
                 thresholds=Thresholds(min_busbw=ns.min_busbw, profile=ns.profile, rel_ratio=ns.rel_ratio,
                                       mad_z=ns.mad_z, min_bandwidth=ns.min_bandwidth,
                                       min_channels=ns.min_channels),
                 out=Output(output=ns.output, format=ns.format, taint_key=ns.taint_key, progress=not ns.no_progress,
                            verbose=ns.verbose, rank_order=ns.rank_order, topology=ns.topology,
                            fault_list=getattr(ns, "fault_list", None)),
                 box=Switchbox(nvml_replay=ns.nvml_replay))
    try:
        cfg.measure.size = parse_size(ns.size, "--size") if ns.size else None
        cfg.measure.timeout = parse_duration(ns.timeout, "--timeout")
        cfg.rdzv.join_timeout = parse_duration(ns.join_timeout, "--join-timeout")
        cfg.measure.deadline = parse_duration(ns.deadline, "--deadline")
        cfg.box.switchbox_size = parse_size(ns.switchbox_size, "--switchbox-size")
    except UnitError as exc:
        raise ConfigError(str(exc)) from None
    cfg.box.box_pairs = [_box_pair(t) for t in ns.box_pairs] if ns.box_pairs else None
    _rendezvous(ns, env, cfg)
    from diag.netcheck.report import expand_hostlist
    cfg.rdzv.spawn_dir = env.get("NETCHECK_SPAWN_DIR", "")
    cfg.rdzv.host_rank = int(env["GROUP_RANK"]) if env.get("GROUP_RANK", "").isdigit() else cfg.rdzv.node_rank
    cfg.rdzv.slurm_nodes = expand_hostlist(env.get("SLURM_JOB_NODELIST", ""))
    if ns.mode == "preflight":
        cfg.pairwise = ns.nnodes is not None or "WORLD_SIZE" in env
    cfg.validate()
    return cfg
