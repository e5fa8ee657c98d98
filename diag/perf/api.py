"""Contracts of the performance view (docs/metrics.md).

The agent keeps, per local rank, a sliding window of what its rings recorded
(``window.PerfWindow``) and sends it as ``pb.PerfRank`` in every report; the
collector keeps the latest per rank; ``derive`` turns one into the figures
that ``xpu-diag top`` and the Prometheus endpoint show, so both say the same.
"""

from __future__ import annotations

import dataclasses

from diag.common import options

# --perf-window's and --perf-step's defaults, declared once in their options.
# The step name is also what the tracer records for torch.optim's step().
DEFAULT_WINDOW_S = options.default(options.PERF_WINDOW)
DEFAULT_STEP_NAME = options.default(options.PERF_STEP)
MAX_OPS_PER_RANK = 64                  # op keys beyond this fold into OTHER_OP
OTHER_OP = "other"


class PerfError(RuntimeError):
    """The view cannot be had (no collector, wrong token); one user-facing line."""


@dataclasses.dataclass(frozen=True)
class OpFigures:
    """One op name on one communicator, over the window."""
    name: str
    kind: int
    comm_id: int
    comm_size: int
    count: int
    per_s: float             # calls per second
    mean_s: float            # of the timed calls
    p50_s: float
    p99_s: float
    max_s: float
    bytes_per_s: float       # all calls' bytes / window
    busbw: float | None      # bytes/s on the bus, nccl-tests factors; None where undefined:
                             # not a collective/p2p, fewer than 2 ranks, nothing timed


@dataclasses.dataclass(frozen=True)
class RankFigures:
    """What one row of ``top`` and the rank's gauges show."""
    rank: int
    window_s: float
    gemm_count: int
    gemm_device_s: float     # estimated: timed mean x count
    gemm_tflops: float       # timed FLOPs / timed device time, 1e12/s
    launches_per_s: float
    wait_share: float        # share of wall time inside collectives/p2p, 0..1
    step_s: float            # mean interval between steps; 0 if none seen
    steps: int               # intervals between steps in the window (step_s's divisor)
    allreduce_busbw: float   # bytes/s, the all-reduce on the largest communicator; 0: none
                             # of 2 ranks or more timed
    ops: tuple[OpFigures, ...] = ()
