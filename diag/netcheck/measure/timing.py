"""Time a BandwidthTest the way nccl-tests does: warm-up, then a timed loop."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from diag.netcheck.api import BandwidthTest, TestContext


@dataclass
class Timing:
    seconds: float        # median time of one iteration (t in docs/netcheck.md)
    algbw_gbs: float      # S / t, in GB/s (1e9 bytes/s, as nccl-tests prints)
    busbw_gbs: float      # algbw x bus factor
    mean_seconds: float = 0.0


def sync_device(device: Any) -> None:
    """Wait for queued GPU work so the clock measures it; no-op on CPU."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch
        torch.cuda.synchronize(device)


def wait_work(work: Any, timeout_s: float, what: str, device: Any = None) -> None:
    """Wait for a c10d Work with a deadline; raise TimeoutError naming ``what``.

    gloo raises from wait(timeout) when the op does not complete; we turn that
    into TimeoutError so callers can tell a hang from wrong data. On a CUDA
    device the wait only orders the current stream after the collective:
    NCCL's wait(timeout) polls the host with millisecond sleeps, which cost
    ~1.5 ms per 1 GiB all-reduce on H200 (243 vs 360+ GB/s busbw). There the
    deadline is kept by the NCCL group's own timeout and by the pair job's
    budget (pairjob.guarded), which abandons a stuck pair.
    """
    if getattr(device, "type", "cpu") == "cuda":
        work.wait()
        return
    try:
        ok = work.wait(timedelta(seconds=timeout_s))
    except RuntimeError as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "timed out" in text.lower() or "timeout" in text.lower():
            raise TimeoutError(f"{what} did not complete in {timeout_s:g}s") from None
        raise RuntimeError(f"{what} failed: {text}") from None
    if ok is False:
        raise TimeoutError(f"{what} did not complete in {timeout_s:g}s")


def measure(test: BandwidthTest, ctx: TestContext, warmup: int, iters: int) -> Timing:
    """Set up ``test``, run ``warmup`` untimed and ``iters`` timed iterations.

    Each timed iteration ends with the test's completion wait and a device
    sync, so it covers the work itself. t is the median iteration: on shared
    hosts one preempted or delayed-ACK iteration would otherwise decide a
    verdict. The mean is kept too (nccl-tests reports the mean of a
    back-to-back loop; at the default 1 GiB the two agree within noise).
    """
    test.setup(ctx)
    for _ in range(warmup):
        test.run_once()
    test.finish()
    sync_device(ctx.device)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        test.run_once()
        test.finish()
        sync_device(ctx.device)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    algbw = test.bytes_moved(ctx) / seconds / 1e9
    return Timing(seconds, algbw, algbw * test.bus_factor(ctx.nranks), sum(times) / len(times))
