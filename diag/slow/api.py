"""Contracts of the slow-rank rules: what they read and what they find.

The rules compare a job's ranks with each other over one window, never with
fixed numbers, so they hold on any GPU model. Their input is one
:class:`RankWindow` per rank, made from the collector's performance view; their
output is :class:`SlowFinding` s, which the detector turns into episodes.
"""

from __future__ import annotations

import dataclasses

from diag.common import options

RULE_SLOW_GPU = "slow_gpu"
RULE_STRAGGLER = "straggler"
RULE_SLOW_LINK = "slow_link"


@dataclasses.dataclass(frozen=True)
class CommWindow:
    """One rank's collectives on one communicator over the window."""

    comm_id: int
    comm_name: str          # what users know the group as ("default", a pg name, or the id)
    op: str                 # the busiest op on it (all_reduce, ncclAllReduce ...)
    count: int              # collectives completed
    wait_s: float           # time with at least one in flight (union: overlapping calls count once;
                            # device time where the hook timed them, else host)
    typical_s: float        # that time per call, the window's longest call left out: blind to one long pause
    busbw_bps: float | None  # bus bandwidth of the device-timed samples, bytes/s
    bytes_per_op: float     # mean payload, for comparing like with like


@dataclasses.dataclass(frozen=True)
class RankWindow:
    """What one rank did over the window that ends at the evaluation."""

    rank: int
    node_rank: int
    local_rank: int
    hostname: str
    span_s: float                   # wall time the figures cover (< window while filling)
    gemm_tflops: float | None       # FLOPs / device time of the device-timed GEMM samples
    gemm_samples: int
    gemm_flops_per_call: float      # mean FLOPs of one GEMM: ranks of one role do alike GEMMs
    comms: tuple[CommWindow, ...] = ()
    steps: int = 0                  # optimizer steps (or the named step function) completed
    gc_s: float = 0.0               # time in garbage collection, where the tracer timed it
    launches_per_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """How far from its peers a rank must be, and for how long.

    ``slow`` is --slow-threshold (a fraction: 0.10 is 10 % under the median).
    ``wait_gap`` is how many points of wall time the peers' wait share must
    exceed the straggler's by; ``link`` is the busbw shortfall against the
    median of like communicators. ``min_gemm_samples`` keeps a rank with a
    handful of timed GEMMs (a rank that barely computes) out of the GEMM rule;
    ``min_gemm_flops`` keeps out a rank whose GEMMs are too small to be
    device-bound (see its comment).
    """

    window_s: float = options.default(options.PERF_WINDOW)     # --perf-window
    slow: float = options.default(options.SLOW_THRESHOLD)      # --slow-threshold
    wait_gap: float = 0.10
    link: float = 0.25
    min_gemm_samples: int = 8
    # The hook times a GEMM with CUDA events around its launch. A GEMM is
    # evidence of its card only when the card, not the host, sets that time.
    # 1 GFLOP is about 1.5 us of an H100's bf16 tensor cores (17 us in plain
    # fp32), while the launch costs the host 5 to 10 us (cuBLAS plus
    # cudaLaunchKernel) and more when its CPU is busy: under that, a GPU that
    # waits for the next launch times mostly the host. A healthy Megatron-Core
    # job of hidden 256 (about 50 MFLOP a GEMM, ~1 TFLOP/s on H100) read -9 %
    # to -41 % on one rank or another from host noise alone. The
    # rank's mean FLOPs per call is compared: 20x above that job, 2x under the
    # fake runtime's test GEMMs; a GPT-2 small step's mean is about 40 GFLOP.
    # Smaller GEMMs on a slower card may be device-bound and go unjudged: a
    # missed verdict, never a false one.
    min_gemm_flops: float = 1e9
    min_collectives: int = 5

    def __post_init__(self):
        for name in ("slow", "wait_gap", "link"):
            value = getattr(self, name)
            if not 0.0 < value < 1.0:
                raise ValueError(f"slow threshold {name}: {value!r} must be a fraction between 0 and 1, e.g. 0.1")
        if not self.window_s > 0:
            raise ValueError(f"--perf-window: {self.window_s!r} must be a positive duration, e.g. 60s")


@dataclasses.dataclass(frozen=True)
class SlowFinding:
    """One rank (or one communicator's ranks) found off the pace in one window.

    ``figure`` and ``reference`` are the rank's value and the peers' median in
    the rule's unit (``unit``); ``detail`` is the human half of the SLOW line.
    """

    rule: str
    ranks: tuple[int, ...]
    figure: float
    reference: float
    unit: str
    detail: str
    comm_id: int = 0

    @property
    def deviation(self) -> float:
        """Signed fraction against the reference (-0.23 is 23 % under)."""
        return self.figure / self.reference - 1.0 if self.reference else 0.0

    @property
    def key(self) -> tuple:
        """What one episode is about: the same rule on the same ranks."""
        return (self.rule, self.ranks, self.comm_id)


@dataclasses.dataclass(frozen=True)
class SlowEvent:
    """A finding that held for a whole window: one SLOW line, one event dir."""

    finding: SlowFinding
    since: float          # collector monotonic time the finding was first seen
    declared: float
    windows: tuple[dict[int, RankWindow], ...] = ()   # the evidence
