"""The tracer's share of a framework's step, measured inside one job (issue 32).

Whole runs of the same job under torchrun varied by more than the 1 % to be
shown (45 to 71 ms a Megatron step on one host, docs/frameworks.md), and so
do a launch-bound job's steps inside one run (66 to 160 ms). So this swaps the
tracer's Python wrappers (each traced torch.distributed function and
Work.wait) in and out every BLOCK steps, every rank at the same step, and
times every call through them in both modes: the difference of the per-call
medians, times the calls a step makes, is the host time the tracer adds to a
step, which bounds what it can cost the step (the step's time on the training
thread, where the tracer runs). Each swapped function goes through one switch
in both modes, so only the tracer differs. Under plain torchrun there is no
tracer: nothing is swapped.
"""
import collections
import os
import time

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

MARK = "__xpu_diag_original__"    # diag.tracer.marks.MARK: the wrapper's original
BLOCK = 2
# XPU_AB_MODE: what the "traced" blocks run. "tracer" (default): the tracer's
# wrappers. "same": the plain functions in both kinds of block, an A/A run
# that shows how much the block order alone moves the figures. "bare": a bare
# Python pass-through, the floor any Python wrapper costs.
MODE = os.environ.get("XPU_AB_MODE", "tracer")
_on = [True]
_calls = collections.defaultdict(list)   # (name, traced) -> each call's ns, after warm-up
_timing = [False]
_depth = [0]    # only the outermost switched call is timed: an inner one's time is inside it


def install() -> int:
    """Put a switch in front of each traced function; the number swapped (0: no tracer)."""
    swapped = 0
    for name in list(vars(c10d)):
        traced = getattr(c10d, name)
        plain = getattr(traced, MARK, None)
        if plain is None or not callable(traced):
            continue
        switch = _switch(name, traced, plain)
        setattr(c10d, name, switch)
        if getattr(dist, name, None) is traced:
            setattr(dist, name, switch)
        swapped += 1
    wait = c10d.Work.wait
    plain = getattr(wait, MARK, None)
    if plain is not None:
        c10d.Work.wait = _switch("Work.wait", wait, plain)
        swapped += 1
    return swapped


def _switch(name, traced, plain):
    if MODE == "same":
        traced = plain
    elif MODE == "bare":
        def traced(*args, **kwargs):
            return plain(*args, **kwargs)

    def switch(*args, **kwargs):
        if not _timing[0] or _depth[0]:
            return (traced if _on[0] else plain)(*args, **kwargs)
        on = _on[0]
        _depth[0] += 1
        t0 = time.perf_counter_ns()
        try:
            return (traced if on else plain)(*args, **kwargs)
        finally:
            _calls[(name, on)].append(time.perf_counter_ns() - t0)
            _depth[0] -= 1
    return switch


def at_step(step: int, warmup: int) -> bool:
    """Set the mode for ``step`` (the same on every rank); True when traced.
    After warm-up, blocks of BLOCK steps alternate, untraced first."""
    _timing[0] = step >= warmup
    _on[0] = step < warmup or ((step - warmup) // BLOCK) % 2 == 1
    return _on[0]


def calls() -> dict:
    """Per function: calls in each mode and the median ns of one call."""
    out = {}
    for name in sorted({n for n, _ in _calls}):
        on, off = sorted(_calls.get((name, True), [])), sorted(_calls.get((name, False), []))
        out[name] = {"traced_n": len(on), "plain_n": len(off),
                     "traced_ns": on[len(on) // 2] if on else None, "plain_ns": off[len(off) // 2] if off else None}
    return out
