"""Host <-> GPU copy from pinned memory. busbw = algbw = S / t.

:func:`concurrent_host_copy` runs one copy per GPU at once (all GPUs under
one PCIe switch), which shows a degraded switch uplink that a one-GPU copy
does not: the aggregate stays at one link's worth.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from diag.netcheck.api import BandwidthTest, TestContext


class HostCopy(BandwidthTest):
    name = "host_copy"

    def setup(self, ctx: TestContext) -> None:
        self.ctx = ctx
        count = max(ctx.size_bytes // 4, 1)
        pin = torch.cuda.is_available()
        make = lambda dev: (torch.empty(count, dtype=torch.float32, pin_memory=pin)  # noqa: E731
                            if dev.type == "cpu" else torch.empty(count, dtype=torch.float32, device=dev))
        self.src, self.dst = make(ctx.src_device), make(ctx.dst_device)
        self.src.fill_(1.0)
        self.gpu = ctx.dst_device if ctx.dst_device.type == "cuda" else ctx.src_device

    def bytes_moved(self, ctx: TestContext) -> int:
        return self.src.numel() * 4

    def run_once(self) -> None:
        self.dst.copy_(self.src, non_blocking=True)

    def finish(self) -> None:
        if self.gpu.type == "cuda":
            torch.cuda.synchronize(self.gpu)


def concurrent_host_copy(gpus: list[int], size_bytes: int, to_gpu: bool, iters: int = 5) -> dict[str, Any]:
    """Copy host<->GPU on every GPU in ``gpus`` at once; return aggregate and per-GPU MB/s."""
    count = max(size_bytes // 4, 1)
    host = [torch.ones(count, dtype=torch.float32, pin_memory=True) for _ in gpus]
    dev = [torch.empty(count, dtype=torch.float32, device=f"cuda:{g}") for g in gpus]
    streams = [torch.cuda.Stream(device=f"cuda:{g}") for g in gpus]
    for _ in range(2):  # warm-up
        _copy_all(host, dev, streams, to_gpu)
    start = time.perf_counter()
    for _ in range(iters):
        _copy_all(host, dev, streams, to_gpu)
    seconds = (time.perf_counter() - start) / iters
    total = count * 4 * len(gpus)
    return {"aggregate_mbs": total / seconds / 1e6, "per_gpu_mbs": count * 4 / seconds / 1e6, "seconds": seconds}


def _copy_all(host, dev, streams, to_gpu: bool) -> None:
    for h, d, s in zip(host, dev, streams):
        with torch.cuda.stream(s):
            (d.copy_(h, non_blocking=True) if to_gpu else h.copy_(d, non_blocking=True))
    for s in streams:
        s.synchronize()
