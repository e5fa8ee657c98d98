"""The agent's settings; the launcher fills them in."""

from __future__ import annotations

import dataclasses
import os
import socket

from diag.agent import dumps
from diag.common import envnames
from diag.common.options import Every
from diag.timeline.api import DEFAULT_MAX_SPANS, DEFAULT_WINDOW_S

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
    report_interval: float = 1.0
    sample_interval: float = 0.1
    dump_timeout: float = 30.0
    backoff_min: float = 0.5
    backoff_max: float = 10.0
    dump_tools: tuple = dataclasses.field(default_factory=lambda: dumps.default_tools())  # XPU_TIMER_DUMP_TOOLS
    tool_env: dict | None = None  # env for py-spy/gdb: the launcher's, without LD_PRELOAD etc.
    timeline_window_s: float = DEFAULT_WINDOW_S     # options.TIMELINE_WINDOW
    timeline_max_spans: int = DEFAULT_MAX_SPANS     # per rank
    perf_window_s: float = 60.0   # docs/metrics.md
    perf_step: str = "optimizer.step"
    metrics_port: int | None = None
    metrics_addr: str = "0.0.0.0"
    gpu_sample_interval_s: float = 5.0   # docs/gpu.md; 0: no NVML sampling
    nvml_replay: str | None = None       # NVML answers from a recording (diag.gpu.nvml.ReplayNvml)
    # Recovery (docs/recovery.md): the node's snapshot store, where it is persisted, how often.
    store_dir: str | None = None
    ckpt_dir: str | None = None
    ckpt_persist_every: Every = Every(seconds=600.0)
    nnodes_min: int = 1

    def __post_init__(self):
        if not self.report_interval > 0:
            raise ValueError(f"{ENV_REPORT_INTERVAL}: {self.report_interval!r} must be > 0")
        if not self.timeline_window_s > 0 or self.timeline_max_spans < 1:
            raise ValueError(f"timeline window {self.timeline_window_s!r} s / cap "
                             f"{self.timeline_max_spans!r} spans must be > 0")
