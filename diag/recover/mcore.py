"""Megatron-Core's DistributedOptimizer and ChainedOptimizer as one
registered object: each rank's shard.

A ``DistributedOptimizer`` keeps, on each data-parallel rank, the fp32 main
parameters of its shard of the DDP grad buffer and the inner (torch or TE)
optimizer's state over them; its ``state_dict()`` leaves both out (Megatron
saves them with ``sharded_state_dict``/``save_parameter_state``). Stored
here: the inner optimizer's ``state_dict()`` (moments, step, param groups),
the main shards themselves, and the grad scaler. Restore loads them, copies
the main shards into the DDP param buffer and all-gathers it over the
data-parallel group (what the optimizer's step does), so every rank's model
parameters are again the cast of the main parameters.

A ``ChainedOptimizer`` is its optimizers in order, each stored the same way
(a distributed one) or through its own ``state_dict()`` (the others keep
their whole state there).

Megatron is never imported here: the objects are read by class name.
"""

from __future__ import annotations


def _is(obj, name: str) -> bool:
    return any(c.__name__ == name and c.__module__.startswith("megatron.core.") for c in type(obj).__mro__)


def is_megatron_optimizer(obj) -> bool:
    return _is(obj, "DistributedOptimizer") or _is(obj, "ChainedOptimizer")


class _Distributed:
    """One DistributedOptimizer's shard."""

    def __init__(self, opt):
        self.opt, self.inner = opt, opt.optimizer

    def mains(self) -> list:
        return [p for g in self.inner.param_groups for p in g["params"]]

    def state_dict(self) -> dict:
        out = {"inner": self.inner.state_dict(), "main": dict(enumerate(self.mains()))}
        if getattr(self.opt, "grad_scaler", None) is not None:
            out["grad_scaler"] = self.opt.grad_scaler.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        for i, p in enumerate(self.mains()):    # in place already (state.apply) unless a copy came back
            if state["main"][i] is not p:
                p.data.copy_(state["main"][i])
        self.inner.load_state_dict(state["inner"])
        if "grad_scaler" in state and getattr(self.opt, "grad_scaler", None) is not None:
            self.opt.grad_scaler.load_state_dict(state["grad_scaler"])
        self.opt._copy_main_params_to_model_params()
        for chunk in self.opt.model_chunks:   # the step's param all-gather, synchronous
            chunk.start_param_sync(force_sync=True)


class _Whole:
    """A Megatron optimizer whose state_dict() holds all of it (fp32, float16)."""

    def __init__(self, opt):
        self.opt, self.inner = opt, getattr(opt, "optimizer", None)

    def mains(self) -> list:
        return [p for g in self.inner.param_groups for p in g["params"]] if self.inner is not None else []

    def state_dict(self) -> dict:
        return self.opt.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(state)


class OptimizerState:
    """``state_dict()`` / ``load_state_dict()`` of a DistributedOptimizer or a
    ChainedOptimizer (module docstring)."""

    sharded = True

    def __init__(self, opt):
        parts = opt.chained_optimizers if _is(opt, "ChainedOptimizer") else [opt]
        self.parts = [_Distributed(p) if _is(p, "DistributedOptimizer") else _Whole(p) for p in parts]

    def optimizers(self) -> list:
        """The inner torch optimizers: the Checkpointer's pre-hook goes on them."""
        return [p.inner for p in self.parts if p.inner is not None and hasattr(p.inner, "register_step_pre_hook")]

    def guarded(self) -> list:
        return [m for p in self.parts for m in p.mains()]

    def notes(self) -> list[str]:
        return []

    def state_dict(self) -> dict:
        return {i: p.state_dict() for i, p in enumerate(self.parts)}

    def load_state_dict(self, state: dict) -> None:
        """Collective over each distributed optimizer's data-parallel group."""
        if sorted(state) != list(range(len(self.parts))):
            raise ValueError(f"{len(state)} chained optimizer(s) stored, this job has {len(self.parts)}")
        for i, p in enumerate(self.parts):
            p.load_state_dict(state[i])
