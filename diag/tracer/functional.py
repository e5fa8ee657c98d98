"""torch's functional collectives on CPU tensors (gloo): DTensor, tensor
parallelism, torch.compile'd graphs.

``torch.distributed._functional_collectives`` (DTensor's redistributions,
torchtitan's tensor parallelism, its loss and grad-norm reductions, and the
collectives inductor emits) call ``_c10d_functional::<op>`` ops. Their
autograd kernel runs the process group below the autograd keys, so the
``c10d::`` kernel of dispatch.py never sees the collective they issue: on
gloo, torchtitan's tensor-parallel job showed the tracer 23 of its 95
collectives a step (docs/frameworks.md). On NCCL the hook sees them.

So the functional ops get a kernel of their own at the same ``AutogradCPU``
key, handing on to the kernel that runs without us (``AutogradOther``, the
same autograd kernel): START when the op is issued. The op returns its
output at once and leaves the work in torch's registry, out of reach; its
end is the caller's wait on that output, which on gloo returns when the
collective did: END then. The wait comes two ways, and both are watched:
``torch.ops._c10d_functional.wait_tensor`` called directly (compiled
graphs), seen by a kernel at the same key; and
``_functional_collectives.wait_tensor``, the Python function DTensor's
AsyncCollectiveTensor calls on first use from inside its
``__torch_dispatch__``, below the autograd keys where no kernel of ours
runs: that function is wrapped. An output never waited on is not left in
flight for good: a later op of its group that ends retires it (the lane
rule, docs/records.md).
"""

from __future__ import annotations

from diag.records import format as fmt
from diag.tracer.sizes import dtype_flags, tensor_bytes

# _c10d_functional op -> the torch.distributed name it is recorded under
# (one collective, one name, whoever issued it).
OPS = {
    "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce",
    "all_reduce_coalesced": "all_reduce_coalesced",
    "all_reduce_coalesced_": "all_reduce_coalesced",
    "all_gather_into_tensor": "all_gather_into_tensor",
    "all_gather_into_tensor_out": "all_gather_into_tensor",
    "all_gather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "reduce_scatter_tensor": "reduce_scatter_tensor",
    "reduce_scatter_tensor_out": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced",
    "all_to_all_single": "all_to_all_single",
    "broadcast": "broadcast",
    "broadcast_": "broadcast",
}
DISPATCH_KEY = "AutogradCPU"
MAX_PENDING = 4096    # outputs not waited on yet; past it the oldest is forgotten (its lane retires it)


def register(tracer, groups, completions):
    """Register the kernels; returns the torch.library.Library holding them.
    Raises what torch raises (dispatch.register switches the tracer off)."""
    import torch
    from torch.distributed import distributed_c10d as c10d

    library = torch.library.Library("_c10d_functional", "IMPL")
    pending: dict[int, object] = {}     # output's data_ptr -> its START record
    key = torch._C.DispatchKey
    ours, hand_on = key.AutogradCPU, torch._C.DispatchKeySet(key.AutogradOther)

    def onward(keyset):
        """To the autograd kernel that runs without us: same behaviour, same result."""
        return keyset.remove(ours) | hand_on

    for op_name, name in OPS.items():
        packet = getattr(torch.ops._c10d_functional, op_name, None)
        if packet is None:
            continue  # an op this torch does not have
        library.impl(op_name, _issue(tracer, groups, pending, packet.default, name, c10d, onward), DISPATCH_KEY,
                     with_keyset=True)
    wait = getattr(torch.ops._c10d_functional, "wait_tensor", None)
    if wait is not None:
        library.impl("wait_tensor", _wait(tracer, completions, pending, wait.default, onward), DISPATCH_KEY,
                     with_keyset=True)
    from diag.tracer import import_hooks
    import_hooks.when_imported("torch.distributed._functional_collectives",
                               lambda module: _wrap_python_wait(tracer, completions, pending, module))
    return library


def _ended(tracer, completions, pending, tensor) -> None:
    """``tensor``'s wait returned: END the functional op that produced it."""
    if not pending or not tracer.enabled:
        return
    try:
        tensor = getattr(tensor, "elem", tensor)   # an AsyncCollectiveTensor: the op's own output
        record = pending.pop(tensor.data_ptr(), None)
        if record is not None:
            completions.finished(record)
    except Exception as exc:
        tracer.disable(f"ending a functional collective failed: {exc!r}")


def _wrap_python_wait(tracer, completions, pending, module) -> None:
    from diag.tracer.marks import MARK, rename
    original = getattr(module, "wait_tensor", None)
    if original is None or hasattr(original, MARK):
        return

    def wait_tensor(tensor):
        out = original(tensor)
        _ended(tracer, completions, pending, tensor)
        return out

    setattr(wait_tensor, MARK, original)
    module.wait_tensor = rename(wait_tensor)


def _issue(tracer, groups, pending, op, name, c10d, onward_of):
    import torch
    python_key = torch._C.DispatchKey.Python
    arg_names = [a.name for a in op._schema.arguments]
    group_i = arg_names.index("group_name")
    inputs_i = 0    # input / inputs: what is sent

    def xpu_diag_traced(keyset, *args, **kwargs):
        onward = onward_of(keyset)
        if not tracer.enabled or keyset.has(python_key) or not tracer.enter():
            return op.redispatch(onward, *args, **kwargs)
        try:
            record = None
            try:
                info = groups.lookup(c10d._resolve_process_group(args[group_i]))
                if info is not None:
                    sent = args[inputs_i]
                    record = tracer.begin(fmt.KIND_COLLECTIVE, name, info[0], tensor_bytes(sent), info[1],
                                          info[2], True, dtype_flags(sent))
            except Exception as exc:
                tracer.disable(f"tracing functional {name} failed: {exc!r}")
            if record is None:
                return op.redispatch(onward, *args, **kwargs)
            try:
                out = op.redispatch(onward, *args, **kwargs)
            except BaseException:
                tracer.finish(record, failed=True)
                raise
            try:
                first = out[0] if isinstance(out, (list, tuple)) else out
                if len(pending) >= MAX_PENDING:
                    pending.pop(next(iter(pending)))
                pending[first.data_ptr()] = record
            except Exception as exc:   # the op went fine: end it now, switch the tracer off
                tracer.finish(record)
                tracer.disable(f"watching functional {name} failed: {exc!r}")
            return out
        finally:
            tracer.leave()

    return xpu_diag_traced


def _wait(tracer, completions, pending, op, onward_of):
    def xpu_diag_traced(keyset, *args, **kwargs):
        out = op.redispatch(onward_of(keyset), *args, **kwargs)
        _ended(tracer, completions, pending, args[0])
        return out

    return xpu_diag_traced
