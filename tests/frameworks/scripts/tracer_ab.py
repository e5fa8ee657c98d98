"""The tracer's share of a framework's step, measured inside one job (issue 32).

Whole runs of the same job under torchrun varied by more than the 1 % to be
shown (45 to 71 ms a Megatron step on one host, docs/frameworks.md). Inside
one job the steps agree to a few tenths of a percent, so this swaps the
tracer's Python wrappers in and out in blocks of steps, every rank at the same
step, and the script records each step's mode. Each swapped function goes
through one switch in both modes, so only the tracer differs. Under plain
torchrun there is no tracer: nothing is swapped.
"""
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

MARK = "__xpu_diag_original__"    # diag.tracer.completion.MARK: the wrapper's original
BLOCK = 5
_on = [True]


def install() -> int:
    """Put a switch in front of each traced function; the number swapped (0: no tracer)."""
    swapped = 0
    for name in list(vars(c10d)):
        traced = getattr(c10d, name)
        plain = getattr(traced, MARK, None)
        if plain is None or not callable(traced):
            continue
        switch = _switch(traced, plain)
        setattr(c10d, name, switch)
        if getattr(dist, name, None) is traced:
            setattr(dist, name, switch)
        swapped += 1
    return swapped


def _switch(traced, plain):
    def switch(*args, **kwargs):
        return (traced if _on[0] else plain)(*args, **kwargs)
    return switch


def at_step(step: int, warmup: int) -> bool:
    """Set the mode for ``step`` (the same on every rank); True when traced.
    After warm-up, blocks of BLOCK steps alternate, untraced first."""
    _on[0] = step < warmup or ((step - warmup) // BLOCK) % 2 == 1
    return _on[0]
