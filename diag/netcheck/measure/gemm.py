"""The per-GPU compute check: one GEMM at a fixed shape, in TFLOP/s.

Kept apart from the network figures so that a slow GPU and a slow link are
told apart. FLOPs per iteration = 2 * m * n * k.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from diag.netcheck.measure.timing import sync_device

GPU_SHAPE = 8192          # bf16, large enough to reach the tensor-core plateau
CPU_SHAPE = 256           # fp32, small: CI has two shared cores


@dataclass
class GemmResult:
    shape: int
    dtype: str
    seconds: float
    tflops: float


def run_gemm(device: Any, shape: int | None = None, warmup: int = 2, iters: int = 10) -> GemmResult:
    """Time ``iters`` square matmuls of side ``shape`` on ``device``."""
    gpu = getattr(device, "type", "cpu") == "cuda"
    n = shape or (GPU_SHAPE if gpu else CPU_SHAPE)
    dtype = torch.bfloat16 if gpu else torch.float32
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    out = torch.empty(n, n, dtype=dtype, device=device)
    for _ in range(warmup):
        torch.matmul(a, b, out=out)
    sync_device(device)
    times = []
    for _ in range(iters):
        # Per-iteration median: one preempted iteration (shared CPU, a stray
        # kernel on the GPU) must not make a healthy device look slow.
        start = time.perf_counter()
        torch.matmul(a, b, out=out)
        sync_device(device)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    if not torch.isfinite(out[0, 0]).item():
        raise RuntimeError("GEMM produced a non-finite value")
    return GemmResult(n, str(dtype).replace("torch.", ""), seconds, 2.0 * n ** 3 / seconds / 1e12)
