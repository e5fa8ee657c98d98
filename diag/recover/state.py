"""What the Checkpointer registers, seen one way: a state_dict in, a
state_dict out, and the process group facts it needs."""

from __future__ import annotations

import os
import random

import torch

from diag.recover import api, layout, modstate


class Adapter:
    """A registered object: anything with ``state_dict``/``load_state_dict``
    (modules, optimizers, schedulers, DCP ``Stateful``), or a plain dict
    (saved as is, updated in place on restore)."""

    def __init__(self, obj):
        # A framework's engine or sharded optimizer: a view of this rank's
        # partition (dsengine.py, mcore.py); raises Unsupported where it
        # keeps state the view cannot reach.
        self.view = framework_view(obj)
        if self.view is None and not isinstance(obj, dict) and not (
                hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
            raise TypeError(f"Checkpointer: a {type(obj).__name__} has no state_dict()/load_state_dict(); "
                            f"register a module, an optimizer, a Stateful or a dict")
        self.obj = obj
        self._tensors = modstate.ModuleTensors(obj) if isinstance(obj, torch.nn.Module) else None

    @property
    def sharded(self) -> bool:
        """Each rank holds its own partition (never a replica to broadcast)."""
        return self.view is not None and self.view.sharded

    def optimizers(self) -> list:
        """The torch optimizers whose step changes this object's tensors."""
        if self.view is not None:
            return self.view.optimizers()
        return [self.obj] if hasattr(self.obj, "param_groups") and hasattr(self.obj, "register_step_pre_hook") else []

    def guarded(self) -> list:
        """Tensors only those optimizers' steps change, beyond their params and state."""
        return self.view.guarded() if self.view is not None else []

    def state_dict(self) -> dict:
        if self.view is not None:
            return self.view.state_dict()
        if self._tensors is not None:
            return self._tensors.state_dict()
        return dict(self.obj) if isinstance(self.obj, dict) else self.obj.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if self.view is not None:
            self.view.load_state_dict(state)
        elif isinstance(self.obj, dict):
            self.obj.clear()
            self.obj.update(state)
        else:
            self.obj.load_state_dict(state)

    def flat_params(self) -> list:
        """An optimizer's parameters in its state_dict's numbering."""
        if self.view is not None:
            return []
        return [p for group in getattr(self.obj, "param_groups", ()) for p in group["params"]]


def framework_view(obj):
    """The view of a DeepSpeed engine or a Megatron-Core distributed/chained
    optimizer, None for anything else. Raises dsengine.Unsupported."""
    from diag.recover import dsengine, mcore
    if dsengine.is_engine(obj):
        return dsengine.EngineState(obj)
    if mcore.is_megatron_optimizer(obj):
        return mcore.OptimizerState(obj)
    return None


# State holders whose state_dict() leaves out what a resume needs (module, class
# names: the frameworks are never imported here), registered on their own. A
# snapshot of them would be partial without a word; register() refuses them
# and says so once. (The engine that holds them is registered instead:
# dsengine.py; Megatron's distributed optimizer has a view of its own: mcore.py.)
PARTIAL = {
    ("deepspeed.", "ZeROOptimizer"): "its partition is restored only with the engine's counters and "
                                     "16-bit parameters; register the engine instead: "
                                     "ckpt.register(engine=engine)",
}


def partial_state(obj) -> str:
    """Why a snapshot of ``obj`` would be partial (``PARTIAL``, or a module
    holding ZeRO-3 partitioned parameters); "" if it would not."""
    for cls in type(obj).__mro__:
        for (module, name), why in PARTIAL.items():
            if cls.__name__ == name and cls.__module__.startswith(module):
                return f"a {type(obj).__name__}: {why}"
    from diag.recover import dsengine
    if (isinstance(obj, torch.nn.Module) and not dsengine.is_engine(obj)
            and any(hasattr(p, "ds_status") for p in obj.parameters())):
        return (f"a {type(obj).__name__} with DeepSpeed ZeRO-3 partitioned parameters: this rank holds a "
                f"partition, state_dict() empty placeholders; register the engine instead: "
                f"ckpt.register(engine=engine)")
    return ""


class RNGState:
    """The RNGs a data pipeline and dropout draw from (Python, torch CPU,
    CUDA, NumPy where installed), as a Stateful for ``register_local``."""

    def state_dict(self) -> dict:
        out = {"python": random.getstate(), "torch": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            out["cuda"] = torch.cuda.get_rng_state_all()
        try:
            import numpy as np
            out["numpy"] = np.random.get_state()
        except ImportError:
            pass
        tracker = _megatron_tracker()
        if tracker is not None:
            out["megatron_tracker"] = tracker.get_states()
        return out

    def load_state_dict(self, state: dict) -> None:
        random.setstate(state["python"])
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
        if "numpy" in state:
            import numpy as np
            np.random.set_state(state["numpy"])
        if "megatron_tracker" in state:
            tracker = _megatron_tracker()
            if tracker is not None:
                tracker.set_states(dict(state["megatron_tracker"]))


def _megatron_tracker():
    """Megatron-Core's tensor-parallel RNG tracker (dropout inside its
    tensor-parallel layers draws from it, each TP rank its own stream), where
    the job has imported Megatron; never imported here."""
    import sys
    random_mod = sys.modules.get("megatron.core.tensor_parallel.random")
    if random_mod is None:
        return None
    try:
        return random_mod.get_cuda_rng_tracker()
    except Exception:   # not set up (no model parallel state): nothing to keep
        return None


def has_dtensor(tree) -> bool:
    return any(layout.local(leaf)[1] for _, leaf in layout.leaves(tree) if isinstance(leaf, torch.Tensor))


def dist_info(group=None) -> tuple[int, int]:
    """(global rank, world size of ``group``): from torch.distributed when
    initialised, else torchrun's RANK / WORLD_SIZE, else (0, 1)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(group)
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def apply(adapter: Adapter, name: str, saved: list[tuple[tuple, object]], dtensors: set[tuple],
          where: str) -> None:
    """Load ``saved`` ((path, value) pairs under ``name``, tensors on CPU over
    buffers that go away) into the object. Tensors go into the live state's
    own tensors (a DTensor's local shard) in place; those the live state lacks
    (an optimizer before its first step) are cloned, and a sharded one is
    rebuilt as a DTensor like its parameter."""
    live = dict(layout.leaves(adapter.state_dict()))
    out = []
    for path, value in saved:
        if isinstance(value, torch.Tensor):
            have = live.get(path)
            if isinstance(have, torch.Tensor):
                target = layout.local(have)[0]
                if tuple(target.shape) != tuple(value.shape):
                    raise api.RestoreMismatch(
                        f"{where}: {name}.{'.'.join(map(str, path))} has shape {tuple(value.shape)}, this "
                        f"job's is {tuple(target.shape)}; restore with the same model and world size, "
                        f"or remove {where}")
                with torch.no_grad():    # a framework's master partition is a leaf that requires grad
                    target.copy_(value)
                value = have
            elif path in dtensors:
                value = _as_dtensor(adapter, path, value, name, where)
            else:   # a copy: ``value`` is a view of a mapping that goes away after restore
                device = _param_device(adapter, path, value)
                value = value.to(device, copy=True) if device is not None else value.clone()
        out.append((path, value))
    try:
        adapter.load_state_dict(layout.build(out))
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:   # the module's own words, first line
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise api.RestoreMismatch(f"{where}: {name} does not load into this job's {type(adapter.obj).__name__} "
                                  f"({why[:200]}); restore with the same model, or remove {where}") from None


def _param_device(adapter: Adapter, path: tuple, value: torch.Tensor):
    """Where an optimizer keeps a state tensor shaped like its parameter
    (exp_avg ...): straight there, not through a host copy. Scalars such as
    Adam's ``step`` stay where they were saved (on the host unless capturable)."""
    params = adapter.flat_params()
    if len(path) < 3 or path[0] != "state" or not isinstance(path[1], int) or path[1] >= len(params):
        return None
    p = layout.local(params[path[1]])[0]
    return p.device if value.dim() and tuple(value.shape) == tuple(p.shape) else None


def _as_dtensor(adapter: Adapter, path: tuple, value: torch.Tensor, name: str, where: str):
    from torch.distributed.tensor import DTensor
    params = adapter.flat_params()
    if len(path) < 3 or path[0] != "state" or not isinstance(path[1], int) or path[1] >= len(params):
        raise api.RestoreMismatch(f"{where}: {name}.{'.'.join(map(str, path))} was a sharded tensor with "
                                  f"no live counterpart; restore with the same model and sharding")
    p = params[path[1]]
    # a copy: ``value`` is a view of a mapping that goes away after restore
    return DTensor.from_local(value.to(layout.local(p)[0].device, copy=True), p.device_mesh, p.placements,
                              run_check=False, shape=p.shape, stride=p.stride())
