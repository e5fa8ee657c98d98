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

    On a GPU, t is the mean of one back-to-back loop ended by a single device
    sync, exactly as nccl-tests times it: a sync and data check after every
    iteration put a bubble between collectives that read 7% under
    all_reduce_perf at 1 GiB on H200 x2. On CPU (gloo) each iteration is timed
    on its own and t is the median: on shared hosts one preempted or
    delayed-ACK iteration would otherwise decide a verdict; the mean is kept.
    """
    test.setup(ctx)
    cuda = getattr(ctx.device, "type", "cpu") == "cuda"
    # The first NCCL call of a pair creates its communicator (seconds): a
    # back-to-back mean must never include it, even where rounds skip warm-up.
    for _ in range(max(warmup, 1) if cuda else warmup):
        test.run_once()
    test.finish()
    sync_device(ctx.device)
    if cuda:
        start = time.perf_counter()
        for _ in range(iters):
            test.run_once()
        sync_device(ctx.device)
        seconds = mean = (time.perf_counter() - start) / iters
        test.finish()
    else:
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            test.run_once()
            test.finish()
            sync_device(ctx.device)
            times.append(time.perf_counter() - start)
        seconds, mean = statistics.median(times), sum(times) / len(times)
    algbw = test.bytes_moved(ctx) / seconds / 1e9
    return Timing(seconds, algbw, algbw * test.bus_factor(ctx.nranks), mean)
