"""One pair's work on one node: a 2-rank group, then every pair test, under a deadline.

The group is a bare c10d backend (ProcessGroupGloo / ProcessGroupNCCL) built
on its own store prefix, so pairs never need a job-wide collective and a dead
node can only break its own pair. Each collective waits at most --timeout;
the whole job also runs in a thread that is abandoned if it outlives the sum
of those deadlines (a backend that ignores its timeout cannot hang netcheck).
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any, Callable

from torch.distributed import PrefixStore, ProcessGroupGloo, TCPStore

from diag.netcheck.api import RULE_ERROR, RULE_TIMEOUT, TestContext
from diag.netcheck.measure import PAIR_TESTS
from diag.netcheck.measure.timing import measure


def make_group(addr: str, port: int, prefix: str, rank: int, timeout_s: float, backend: str,
               iface: str = "", addr_bind: str = "") -> Any:
    """A 2-rank group over a fresh store client whose waits also end at ``timeout_s``."""
    timeout = timedelta(seconds=timeout_s)
    name = prefix.strip("/").replace("/", "-")     # unique per pair: logs and NCCL's flight recorder
    store = PrefixStore(prefix, TCPStore(addr, port, None, False, timeout, wait_for_workers=False))
    if backend == "nccl":
        # Abort the communicator and raise on timeout instead of killing the process.
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")
        from torch.distributed import ProcessGroupNCCL
        opts = ProcessGroupNCCL.Options()
        opts._timeout = timeout
        opts.is_high_priority_stream = False
        opts.group_name = name
        return ProcessGroupNCCL(store, rank, 2, opts)
    opts = ProcessGroupGloo._Options()
    opts._timeout = timeout
    opts.group_name = name
    # --iface: gloo's own lookup; else the address iface.choose() routed towards the master.
    if iface:
        device = ProcessGroupGloo.create_device(interface=iface)
    elif addr_bind:
        device = ProcessGroupGloo.create_device(hostname=addr_bind)
    else:
        device = ProcessGroupGloo.create_default_device()
    opts._devices = [device]
    return ProcessGroupGloo(store, rank, 2, opts)


def run_pair_tests(group: Any, rank: int, device: Any, size: int, warmup: int, iters: int,
                   timeout_s: float) -> dict[str, Any]:
    """Every test in PAIR_TESTS on ``group``; returns {test: figures}. Raises on failure."""
    out = {}
    for name, cls in PAIR_TESTS.items():
        ctx = TestContext(size_bytes=size, device=device, timeout_s=timeout_s, group=group,
                          rank=rank, nranks=2, peer=1 - rank)
        test = cls()
        t = measure(test, ctx, warmup, iters)
        out[name] = {"bytes": test.bytes_moved(ctx), "seconds": t.seconds,
                     "algbw": t.algbw_gbs, "busbw": t.busbw_gbs, "mean_seconds": t.mean_seconds}
    return out


def pair_job_budget(timeout_s: float, warmup: int, iters: int) -> float:
    """Upper bound for a job whose every wait honours ``timeout_s`` (+ group set-up)."""
    return timeout_s * ((warmup + iters) * len(PAIR_TESTS) * 2 + 2) + 10.0


def guarded(job: Callable[[], dict[str, Any]], budget_s: float, what: str) -> tuple[dict[str, Any], bool]:
    """Run ``job`` in a daemon thread; return (result, abandoned).

    The result is ``{"ok": True, "tests": ...}`` or ``{"ok": False, "rule": ...,
    "error": one line}``. ``abandoned`` is True when the thread outlived
    ``budget_s``; the caller must then not reuse the device and should exit.
    """
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["tests"] = job()
        except TimeoutError as exc:
            box["fail"] = (RULE_TIMEOUT, f"{what}: {exc}")
        except Exception as exc:  # noqa: BLE001 - any failure of the pair is a verdict, not a crash
            text = str(exc).strip().splitlines()
            box["fail"] = (RULE_ERROR, f"{what}: {text[0] if text else type(exc).__name__}")

    thread = threading.Thread(target=body, name="netcheck-pair", daemon=True)
    thread.start()
    thread.join(budget_s)
    if thread.is_alive():
        return {"ok": False, "rule": RULE_TIMEOUT, "error": f"{what}: stuck for {budget_s:g}s; abandoned"}, True
    if "fail" in box:
        rule, error = box["fail"]
        if "timed out" in error.lower() or "timeout" in error.lower():
            rule = RULE_TIMEOUT
        return {"ok": False, "rule": rule, "error": error}, False
    return {"ok": True, "tests": box["tests"]}, False
