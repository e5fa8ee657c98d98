"""Time a BandwidthTest the way nccl-tests does: warm-up, then a timed loop."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from diag.netcheck.api import BandwidthTest, TestContext


@dataclass
class Timing:
    seconds: float        # mean time of one iteration
    algbw_gbs: float      # S / t, in GB/s (1e9 bytes/s, as nccl-tests prints)
    busbw_gbs: float      # algbw x bus factor


def sync_device(device: Any) -> None:
    """Wait for queued GPU work so the clock measures it; no-op on CPU."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch
        torch.cuda.synchronize(device)


def wait_work(work: Any, timeout_s: float, what: str) -> None:
    """Wait for a c10d Work with a deadline; raise TimeoutError naming ``what``.

    gloo and NCCL both raise from wait(timeout) when the op does not complete;
    we turn that into TimeoutError so callers can tell a hang from wrong data.
    """
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

    The timed loop is bracketed by device syncs, so on GPU it covers all the
    queued work, as nccl-tests' ``startColl``/``completeColl`` loop does.
    """
    test.setup(ctx)
    for _ in range(warmup):
        test.run_once()
    test.finish()
    sync_device(ctx.device)
    start = time.perf_counter()
    for _ in range(iters):
        test.run_once()
    test.finish()
    sync_device(ctx.device)
    seconds = (time.perf_counter() - start) / max(iters, 1)
    algbw = test.bytes_moved(ctx) / seconds / 1e9
    return Timing(seconds, algbw, algbw * test.bus_factor(ctx.nranks))
