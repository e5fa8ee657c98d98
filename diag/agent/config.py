"""The agent's settings; the launcher fills them in."""

from __future__ import annotations

import dataclasses
import os
import socket

from diag.agent import dumps
from diag.common import envnames
from diag.common import options
from diag.common.options import Every
from diag.timeline.api import DEFAULT_MAX_SPANS

ENV_REPORT_INTERVAL = envnames.REPORT_INTERVAL


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    shm_dir: str
    collector: str | None        # host:port; None runs the agent without reporting
    token: str
    job_id: str
    node_rank: int = 0
    local_world_size: int = 0
    root_pid: int = dataclasses.field(default_factory=os.getpid)
    hostname: str = dataclasses.field(default_factory=socket.gethostname)
    # The fields of options.AGENT default to their option's default (declared
    # once, in diag/common/options.py); the rest are the agent's own.
    report_interval: float = options.default(options.REPORT_INTERVAL)
    sample_interval: float = 0.1
    dump_timeout: float = 30.0
    backoff_min: float = 0.5
    backoff_max: float = 10.0
    dump_tools: tuple = dataclasses.field(default_factory=lambda: dumps.default_tools())  # XPU_TIMER_DUMP_TOOLS
    tool_env: dict | None = None  # env for py-spy/gdb: the launcher's, without LD_PRELOAD etc.
    timeline_window_s: float = options.default(options.TIMELINE_WINDOW)
    timeline_max_spans: int = DEFAULT_MAX_SPANS     # per rank
    perf_window_s: float = options.default(options.PERF_WINDOW)   # docs/metrics.md
    perf_step: str = options.default(options.PERF_STEP)
    metrics_port: int | None = None
    metrics_addr: str = options.default(options.METRICS_ADDR)
    gpu_sample_interval_s: float = options.default(options.GPU_SAMPLE_INTERVAL)   # docs/gpu.md; 0: no NVML sampling
    nvml_replay: str | None = None       # NVML answers from a recording (diag.gpu.nvml.ReplayNvml)
    # Recovery (docs/recovery.md): the node's snapshot store, where it is persisted, how often.
    store_dir: str | None = None
    ckpt_dir: str | None = None
    ckpt_persist_every: Every = options.default(options.CKPT_PERSIST_EVERY)
    nnodes_min: int = 1

    def __post_init__(self):
        if not self.report_interval > 0:
            raise ValueError(f"{ENV_REPORT_INTERVAL}: {self.report_interval!r} must be > 0")
        if not self.timeline_window_s > 0 or self.timeline_max_spans < 1:
            raise ValueError(f"timeline window {self.timeline_window_s!r} s / cap "
                             f"{self.timeline_max_spans!r} spans must be > 0")
