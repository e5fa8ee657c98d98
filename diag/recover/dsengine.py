"""A DeepSpeed engine (ZeRO stages 1, 2 and 3) as one registered object.

Registered with ``ckpt.register(engine=engine)``, each rank keeps its own
partition, what ``engine.save_checkpoint()`` writes to that rank's
``zero_pp_rank_*_optim_states.pt`` and the model file:

* the ZeRO optimizer's ``state_dict()``: the fp32 master partition, the base
  optimizer's state over it (Adam's moments and step), the loss scaler, the
  partition layout;
* the engine's counters (``global_steps``, ``global_samples``,
  ``skipped_steps``, ``micro_steps``) and its LR scheduler;
* the module's persistent buffers (ZeRO never partitions them).

The 16-bit parameters are not stored: after the step they are a cast of the
fp32 master partition, all-gathered, and restore rebuilds them that way
(stage 1/2: ``update_lp_params``; stage 3: the fp16 partitions from fp32 and
the persistent parameters gathered, as ``engine.load_checkpoint`` does).
Parameters with ``requires_grad=False`` are not stored: no step changes
them, so the restarted job has them as it built them (said once at register).

DeepSpeed is never imported here: the engine in hand is read through its
attributes, by class name.
"""

from __future__ import annotations

import torch

# Lists of tensors in the ZeRO optimizers' state_dict(): stored as {index: tensor}
# so their bytes go to the slot's data region, not the pickled objects.
_TENSOR_LISTS = ("single_partition_of_fp32_groups", "fp32_flat_groups")
_COUNTERS = ("global_steps", "global_samples", "skipped_steps", "micro_steps")
_ZERO_1_2, _ZERO_3 = "DeepSpeedZeroOptimizer", "DeepSpeedZeroOptimizer_Stage3"


class Unsupported(Exception):
    """The engine keeps state this view cannot reach; the message is why and the fix."""


def is_engine(obj) -> bool:
    return any(c.__name__ == "DeepSpeedEngine" and c.__module__.startswith("deepspeed.")
               for c in type(obj).__mro__)


def _offload(engine) -> str:
    """The ZeRO-Offload setting that keeps state outside what the view reads, or ""."""
    zc = engine._config.zero_config
    for what in ("offload_optimizer", "offload_param"):
        cfg = getattr(zc, what, None)
        device = str(getattr(getattr(cfg, "device", None), "value", getattr(cfg, "device", "none")) or "none")
        if cfg is not None and device not in ("none", "OffloadDeviceEnum.none"):
            return f"zero_optimization.{what}.device={device}"
    return ""


class EngineState:
    """``state_dict()`` / ``load_state_dict()`` of one rank's ZeRO partition
    (module docstring). Raises :class:`Unsupported` at construction for an
    engine whose state lies elsewhere (offload, another optimizer wrapper)."""

    sharded = True

    def __init__(self, engine):
        self.engine = engine
        opt = engine.optimizer
        name = type(opt).__name__
        offload = _offload(engine)
        if offload:
            raise Unsupported(f"a DeepSpeedEngine with {offload}: ZeRO-Offload keeps the optimizer's state "
                              f"(or the parameters) in host memory or on NVMe, outside what a snapshot holds; "
                              f"remove the offload setting, or use engine.save_checkpoint()")
        if name not in (_ZERO_1_2, _ZERO_3):
            stage = engine.zero_optimization_stage()
            raise Unsupported(f"a DeepSpeedEngine at ZeRO stage {stage} whose optimizer is a {name} (snapshots "
                              f"cover ZeRO stages 1-3's DeepSpeedZeroOptimizer{'_Stage3' if stage == 3 else ''}; "
                              f"bf16 with stage 1 and fp32 gradient accumulation uses BF16_Optimizer): use ZeRO "
                              f"stage 2 or 3, or engine.save_checkpoint()")
        self.opt, self.stage3 = opt, name == _ZERO_3
        self.base = opt.optimizer         # the torch optimizer over the fp32 partitions
        self.frozen = sum(1 for p in engine.module.parameters() if not p.requires_grad)

    # -- what the Checkpointer asks of a registered object --------------------

    def optimizers(self) -> list:
        """The torch optimizers whose step changes the stored tensors: the
        Checkpointer's pre-hook goes on them."""
        return [self.base]

    def guarded(self) -> list[torch.Tensor]:
        """Tensors only the base optimizer's step changes (the pre-hook
        guards them; they are not cloned at save)."""
        groups = self.opt.fp32_partitioned_groups_flat if self.stage3 else self.opt.single_partition_of_fp32_groups
        return list(groups)

    def notes(self) -> list[str]:
        if self.frozen:
            return [f"{self.frozen} parameter(s) with requires_grad=False are not snapshotted: no step changes "
                    f"them, and the restarted job must build them as this one did"]
        return []

    def state_dict(self) -> dict:
        e = self.engine
        opt_sd = dict(self.opt.state_dict())
        for key in _TENSOR_LISTS:
            if key in opt_sd:
                opt_sd[key] = dict(enumerate(opt_sd[key]))
        out = {"optimizer": opt_sd, "counters": {k: getattr(e, k) for k in _COUNTERS},
               "buffers": dict(_persistent_buffers(e.module))}
        if e.lr_scheduler is not None:
            out["lr_scheduler"] = e.lr_scheduler.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        """Collective over the data-parallel group (the 16-bit parameters are
        all-gathered), as ``engine.load_checkpoint`` is."""
        e, opt = self.engine, self.opt
        opt_sd = dict(state["optimizer"])
        for key in _TENSOR_LISTS:
            if key in opt_sd:
                opt_sd[key] = [opt_sd[key][i] for i in sorted(opt_sd[key])]
        # ZeRO's load_state_dict reads the list at this rank's data-parallel index
        import torch.distributed as dist
        group = opt.dp_process_group
        listed = [None] * dist.get_world_size(group=group)
        listed[dist.get_rank(group=group)] = opt_sd
        if hasattr(opt, "checkpoint_event_prologue"):
            opt.checkpoint_event_prologue()       # stage 3: every parameter partitioned first
        opt.load_state_dict(listed, load_optimizer_states=True, load_from_fp32_weights=True)
        if not self.stage3:
            opt.update_lp_params()                # 16-bit partition from fp32, all-gathered
        if hasattr(opt, "checkpoint_event_epilogue"):
            opt.checkpoint_event_epilogue()       # stage 3: the persistent parameters gathered
        for key in _COUNTERS:
            setattr(e, key, state["counters"][key])
        if "lr_scheduler" in state and e.lr_scheduler is not None:
            e.lr_scheduler.load_state_dict(state["lr_scheduler"])
        live = dict(_persistent_buffers(e.module))
        for name, value in state.get("buffers", {}).items():
            if live.get(name) is not None and live[name] is not value:
                live[name].copy_(value)


def _persistent_buffers(module):
    for prefix, m in module.named_modules():
        for name, b in m._buffers.items():
            if b is not None and name not in m._non_persistent_buffers_set:
                yield (f"{prefix}.{name}" if prefix else name), b
