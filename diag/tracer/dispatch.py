"""Collectives on CPU tensors (gloo), whoever issues them: Python, DDP's reducer, C++.

DDP's reducer and its buffer broadcast call the process group from C++, so the
Python wrappers in ``collectives.py`` never see them; on NCCL the C++ hook
does, on gloo nothing did. Every ProcessGroup collective, whoever calls it,
goes through torch's dispatcher as a ``c10d::`` op (``c10d::allreduce_``,
``c10d::broadcast_``, ...). For CPU tensors the first kernel the dispatcher
runs for such an op is the autograd fallback at the ``AutogradCPU`` key. We
register a Python kernel there that writes START, hands the call on unchanged
and hands the returned work to the completion watcher (completion.py), which
writes END at the op's real end. CUDA tensors (NCCL, the hook's) never reach it.

Handing on: the kernel redispatches to the ``AutogradOther`` key, whose
kernel is the same autograd fallback that would have run without us, so
torch's behaviour (its warning on a backward through a collective included)
is unchanged, and the result (tensors and work) is returned as is.

A call already traced by a Python wrapper (``dist.all_reduce``) is recorded
once: the wrapper marks the thread busy and the kernel hands straight on.
Tensors with the Python key (fake or functional tensors while torch.compile
traces) are handed on unrecorded. Cost: see docs/tracer.md and
``bench/cpp_collective_overhead.py``.
"""

from __future__ import annotations

import atexit
import os

from diag.common import envnames
from diag.records import format as fmt
from diag.tracer import completion
from diag.tracer.sizes import tensor_bytes

# c10d op -> (name in records, kind, argument whose tensors are counted as bytes).
# The names are the torch.distributed ones the Python wrappers use, so one
# collective has one name whoever issued it.
OPS = {
    "allreduce_": ("all_reduce", fmt.KIND_COLLECTIVE, "tensors"),
    "allreduce_coalesced_": ("all_reduce_coalesced", fmt.KIND_COLLECTIVE, "tensors"),
    "broadcast_": ("broadcast", fmt.KIND_COLLECTIVE, "tensors"),
    "reduce_": ("reduce", fmt.KIND_COLLECTIVE, "tensors"),
    "allgather_": ("all_gather", fmt.KIND_COLLECTIVE, "input_tensors"),
    "_allgather_base_": ("all_gather_into_tensor", fmt.KIND_COLLECTIVE, "input_tensor"),
    "allgather_coalesced_": ("all_gather_coalesced", fmt.KIND_COLLECTIVE, "input_list"),
    "allgather_into_tensor_coalesced_": ("all_gather_into_tensor_coalesced", fmt.KIND_COLLECTIVE, "inputs"),
    "reduce_scatter_": ("reduce_scatter", fmt.KIND_COLLECTIVE, "input_tensors"),
    "_reduce_scatter_base_": ("reduce_scatter_tensor", fmt.KIND_COLLECTIVE, "input_tensor"),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter_tensor_coalesced", fmt.KIND_COLLECTIVE, "inputs"),
    "alltoall_": ("all_to_all", fmt.KIND_COLLECTIVE, "input_tensors"),
    "alltoall_base_": ("all_to_all_single", fmt.KIND_COLLECTIVE, "input"),
    "gather_": ("gather", fmt.KIND_COLLECTIVE, "input_tensors"),
    "scatter_": ("scatter", fmt.KIND_COLLECTIVE, "output_tensors"),
    "barrier": ("barrier", fmt.KIND_COLLECTIVE, None),
    "monitored_barrier_": ("monitored_barrier", fmt.KIND_COLLECTIVE, None),
    "send": ("send", fmt.KIND_P2P, "tensors"),
    "recv_": ("recv", fmt.KIND_P2P, "tensors"),
    "recv_any_source_": ("recv", fmt.KIND_P2P, "tensors"),
}
DISPATCH_KEY = "AutogradCPU"

_library = None   # the torch.library.Library holding our kernels; None when not installed
_functional = None   # the one holding the functional collectives' (functional.py)
_below = None     # torch._C._AutoDispatchBelowAutograd, where this torch has it


def install(tracer, groups) -> None:
    """Register the kernels once per process, as soon as torch can take them.

    torch imports torch.distributed (and so runs our patch) halfway through
    its own import, before ``torch.library`` exists; it imports
    ``torch.distributed._meta_registrations`` last, with the library ready.
    """
    if os.environ.get(envnames.TRACER_CPP_COLLECTIVES, "1").strip().lower() in ("0", "false", "no", "off"):
        return  # opted out: only Python-issued collectives are traced on gloo
    import torch
    if hasattr(torch, "library") and hasattr(torch, "ops"):
        register(tracer, groups)
        return
    from diag.tracer import import_hooks
    import_hooks.when_imported("torch.distributed._meta_registrations", lambda _m: register(tracer, groups))


def register(tracer, groups) -> bool:
    """Register the kernels now; True when they are in place. Never raises:
    a failure switches the tracer off, as any tracer failure does."""
    global _library, _below, _functional
    if _library is not None:
        return True
    try:
        import torch
        from torch._C._distributed_c10d import ProcessGroup, Work
        library = torch.library.Library("c10d", "IMPL")
        completions = completion.watcher(tracer)
        atexit.register(_let_go_of_gloo, completions)   # runs before the watcher's own close
        for op_name, (name, kind, size_arg) in OPS.items():
            packet = getattr(torch.ops.c10d, op_name, None)
            if packet is None:
                continue  # an op this torch does not have
            kernel = _kernel(tracer, groups, completions, packet.default, name, kind, size_arg, ProcessGroup, Work)
            library.impl(op_name, kernel, DISPATCH_KEY, with_keyset=True)
        from diag.tracer import functional
        _functional = functional.register(tracer, groups, completions)
        _library = library
        _below = getattr(torch._C, "_AutoDispatchBelowAutograd", None)
        return True
    except Exception as exc:
        tracer.disable(f"cannot trace collectives issued from C++: {exc!r}")
        return False


def _let_go_of_gloo(completions) -> None:
    """At exit, tear gloo's groups down while the interpreter is whole.

    The kernel boxes the tensors of C++-issued collectives (DDP's buckets)
    into Python objects, which the tensors then keep. gloo's worker thread
    drops its reference to a finished work a moment after completing it; when
    that is the last reference to such a tensor and the main thread has begun
    finalising meanwhile (a job that exits right after its last collective,
    as Lightning's does without destroying its gloo group), the thread needs
    the GIL to free it, is ended by the interpreter instead, and the unwind
    through gloo's destructors aborts the worker ("terminate called without
    an active exception"). ``destroy_process_group`` joins gloo's threads now,
    GIL released, as torch asks every job to do at exit. Left alone: NCCL
    groups (never boxed here), and any group while an op is still pending
    (joining a thread inside a hung collective would hang the exit).
    """
    try:
        # Look first: a bucket all-reduce that finished a moment ago (DDP's
        # backward as the job's last act) is pending only until someone looks.
        completions.check()
        pending = completions.pending()
        completions.close()
        import torch.distributed as dist
        if pending or not dist.is_initialized() or dist.get_backend() != "gloo":
            return
        dist.destroy_process_group()
    except Exception:   # exiting: nothing here may stand in the way
        pass


def uninstall() -> None:
    """Remove the kernels (tests, bench)."""
    global _library, _functional
    if _functional is not None:
        _functional._destroy()
        _functional = None
    if _library is not None:
        _library._destroy()
        _library = None


def installed() -> bool:
    return _library is not None


def below_autograd():
    """torch's guard that dispatches below the autograd keys, while the
    kernels are in place; None otherwise (nothing to go past). Read on every
    traced call: looked up once, at register()."""
    return _below if _library is not None else None


def _kernel(tracer, groups, completions, op, name, kind, size_arg, ProcessGroup, Work):
    import torch

    DispatchKey = torch._C.DispatchKey
    hand_on = torch._C.DispatchKeySet(DispatchKey.AutogradOther)
    arg_names = [a.name for a in op._schema.arguments]
    pg_i = arg_names.index("process_group")
    size_i = arg_names.index(size_arg) if size_arg in arg_names else None
    sequenced = kind == fmt.KIND_COLLECTIVE
    returns_tuple = len(op._schema.returns) > 1
    python_key = DispatchKey.Python

    def xpu_diag_traced(keyset, *args):
        # To the autograd fallback that runs without us: same behaviour, same result.
        onward = keyset.remove(DispatchKey.AutogradCPU) | hand_on
        if not tracer.enabled or keyset.has(python_key) or not tracer.enter():
            return op.redispatch(onward, *args)
        try:
            record = None
            try:
                info = groups.lookup(ProcessGroup.unbox(args[pg_i]))
                if info is not None:
                    nbytes = tensor_bytes(args[size_i]) if size_i is not None else 0
                    record = tracer.begin(kind, name, info[0], nbytes, info[1], info[2], sequenced)
            except Exception as exc:
                tracer.disable(f"tracing {name} issued from C++ failed: {exc!r}")
            if record is None:
                return op.redispatch(onward, *args)
            try:
                out = op.redispatch(onward, *args)
            except BaseException:
                tracer.finish(record, failed=True)
                raise
            try:
                work = out[-1] if returns_tuple else out
                if work is None:   # a synchronous op: done
                    completions.finished(record)
                else:
                    completions.add(record, [Work.unbox(work)], True)   # CPU tensors: AutogradCPU
            except Exception as exc:  # the op itself went fine: end it, switch the tracer off
                tracer.finish(record)
                tracer.disable(f"watching the completion of {name} failed: {exc!r}")
            return out
        finally:
            tracer.leave()

    return xpu_diag_traced
