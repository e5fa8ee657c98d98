"""Patch torch.distributed collectives and point-to-point calls.

Each wrapper calls the original with the caller's arguments and returns its
result untouched. Sync ops get END when the call returns; async ones
(``async_op=True``, isend/irecv, batch_isend_irecv) get END from the
completion watcher (completion.py) when their work is done, so the tracer
never waits on anything.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import threading
import weakref

from diag.records import format as fmt
from diag.tracer import completion, device, dispatch, hooked
from diag.tracer.marks import MARK, rename
from diag.tracer.sizes import dtype_flags, tensor_bytes

# name -> (kind, parameter whose tensor size is recorded as bytes)
OPS = {
    "all_reduce": (fmt.KIND_COLLECTIVE, "tensor"),
    "all_gather": (fmt.KIND_COLLECTIVE, "tensor"),
    "all_gather_into_tensor": (fmt.KIND_COLLECTIVE, "input_tensor"),
    "all_gather_single": (fmt.KIND_COLLECTIVE, "input_tensor"),   # torch 2.13's name for the above
    "all_gather_coalesced": (fmt.KIND_COLLECTIVE, "input_tensor_list"),
    "all_reduce_coalesced": (fmt.KIND_COLLECTIVE, "tensors"),
    "reduce_scatter": (fmt.KIND_COLLECTIVE, "input_list"),
    "reduce_scatter_tensor": (fmt.KIND_COLLECTIVE, "input"),
    "reduce_scatter_single": (fmt.KIND_COLLECTIVE, "input"),     # torch 2.13's name for the above
    "broadcast": (fmt.KIND_COLLECTIVE, "tensor"),
    "reduce": (fmt.KIND_COLLECTIVE, "tensor"),
    "barrier": (fmt.KIND_COLLECTIVE, None),
    "all_to_all": (fmt.KIND_COLLECTIVE, "input_tensor_list"),
    "all_to_all_single": (fmt.KIND_COLLECTIVE, "input"),
    "gather": (fmt.KIND_COLLECTIVE, "tensor"),
    "scatter": (fmt.KIND_COLLECTIVE, "tensor"),
    "send": (fmt.KIND_P2P, "tensor"),
    "recv": (fmt.KIND_P2P, "tensor"),
    "isend": (fmt.KIND_P2P, "tensor"),
    "irecv": (fmt.KIND_P2P, "tensor"),
}
_grad_enabled = None   # torch.is_grad_enabled, bound by patch()


def patch(tracer) -> None:
    """Replace the functions in torch.distributed and distributed_c10d (the same
    wrapper in both, so identity checks such as P2POp's still hold)."""
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d
        if not dist.is_available():
            return
        global _grad_enabled
        import torch
        _grad_enabled = torch.is_grad_enabled
        groups = GroupInfo(c10d, tracer)
        share = hooked.find()
        for name, (kind, size_param) in OPS.items():
            original = getattr(c10d, name, None)
            if original is None or hasattr(original, MARK):
                continue
            wrapper = _wrap(tracer, groups, original, name, kind, size_param, share)
            _install(dist, c10d, name, original, wrapper)
        original = getattr(c10d, "batch_isend_irecv", None)
        if original is not None and not hasattr(original, MARK):
            _install(dist, c10d, "batch_isend_irecv", original,
                     _wrap_batch(tracer, groups, original, share))
        original = getattr(c10d, "_coalescing_manager", None)
        if original is not None and not hasattr(original, MARK):
            _install(dist, c10d, "_coalescing_manager", original,
                     _wrap_coalescing(tracer, groups, original))
        # Collectives issued from C++ (DDP's reducer) on CPU tensors: gloo.
        dispatch.install(tracer, groups)
    except Exception as exc:
        tracer.disable(f"cannot patch torch.distributed: {exc!r}")


def _install(dist, c10d, name, original, wrapper) -> None:
    setattr(wrapper, MARK, original)
    setattr(c10d, name, wrapper)
    if getattr(dist, name, None) is original:
        setattr(dist, name, wrapper)


def unpatch() -> None:
    """Put the originals back (tests, bench)."""
    from diag.tracer import dispatch
    dispatch.uninstall()
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d
    for name in list(OPS) + ["batch_isend_irecv", "_coalescing_manager"]:
        fn = getattr(c10d, name, None)
        original = getattr(fn, MARK, None)
        if original is not None:
            setattr(c10d, name, original)
            if getattr(dist, name, None) is fn:
                setattr(dist, name, original)


class GroupInfo:
    """comm_id, rank and size per process group, cached.

    The default group is comm_id 0. Another group's id hashes its group name,
    which torch assigns from a counter that every rank advances in the same
    order (new_group is called by all ranks), so it is equal on every member.
    """

    def __init__(self, c10d, tracer=None):
        self._c10d = c10d
        # Weak on both sides: a ProcessGroup kept alive past
        # destroy_process_group() is torn down at interpreter exit instead,
        # and gloo then aborts the worker ("terminate called without an
        # active exception"). The tracer must never own a group.
        self._cache = weakref.WeakKeyDictionary()
        self._tracer = tracer
        self._announced: set[int] = set()   # comm ids whose GROUP record is written

    def lookup(self, group):
        c10d = self._c10d
        world = c10d.GroupMember.WORLD
        pg = world if group is None else group
        if pg is None:
            return None
        try:
            info = self._cache.get(pg)
        except TypeError:  # not weak-referenceable: look it up every time
            info = None
        if info is None or info[3]() is not world:
            try:
                rank, size = c10d.get_rank(pg), c10d.get_world_size(pg)
                comm_id = 0 if pg is world else stable_comm_id(c10d._get_process_group_name(pg))
                name = group_display_name(c10d, pg, pg is world)
                info = (comm_id, rank, size, weakref.ref(world))
            except Exception:  # not a member, not initialised: trace nothing
                return None
            try:
                self._cache[pg] = info
            except TypeError:
                pass
            if self._tracer is not None and comm_id not in self._announced:
                # Once per group: the agent names the group and ties the
                # hook's communicator to it (docs/records.md, EVENT_GROUP).
                self._announced.add(comm_id)
                self._tracer.writer.group(comm_id, name, rank, size)
        return info


def group_display_name(c10d, pg, is_world: bool) -> str:
    """The name users know a group by: "default", else torch's group_desc
    (new_group(group_desc=...)), else its pg name."""
    if is_world:
        return "default"
    desc = getattr(pg, "group_desc", "") or ""
    if desc and desc != "undefined":
        return desc
    return f"pg {c10d._get_process_group_name(pg)}"


_NCCL_REDOPS = {"SUM": 0, "PRODUCT": 1, "MAX": 2, "MIN": 3, "AVG": 4}
# Parameter naming the root (rooted collectives) or peer (p2p) of each op.
_PEER_PARAMS = {"broadcast": "src", "reduce": "dst", "gather": "dst", "scatter": "src",
                "send": "dst", "recv": "src", "isend": "dst", "irecv": "src"}
_REDUCING = ("all_reduce", "all_reduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_tensor",
             "reduce_scatter_single")


# Per-call lookups are cached by the op object: one dict hit.
_redop_cache: dict = {}


def reduce_op_code(op) -> int:
    """NCCL number of a torch ReduceOp (default SUM); -1 for others (BAND, ...)."""
    if op is None:
        return 0
    try:
        return _redop_cache[op]
    except (KeyError, TypeError):
        pass
    name = getattr(op, "name", None) or str(op).rpartition(".")[2]
    code = _NCCL_REDOPS.get(str(name).upper(), -1)
    try:
        _redop_cache[op] = code
    except TypeError:   # an unhashable op object (PREMUL_SUM with its factor)
        pass
    return code


def stable_comm_id(group_name: str) -> int:
    digest = hashlib.blake2b(b"pg:" + group_name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1


def _param_index(fn, param):
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return names.index(param) if param in names else None


def _arg(args, kwargs, name, index, default=None):
    if name in kwargs:
        return kwargs[name]
    if index is not None and index < len(args):
        return args[index]
    return default


def _wrap(tracer, groups, original, name, kind, size_param, share=hooked.HookShare()):
    group_i = _param_index(original, "group")
    async_i = _param_index(original, "async_op")
    size_i = _param_index(original, size_param) if size_param else None
    always_async = name in ("isend", "irecv")
    sequenced = kind == fmt.KIND_COLLECTIVE
    peer_param = _PEER_PARAMS.get(name)
    peer_i = _param_index(original, peer_param) if peer_param else None
    op_i = _param_index(original, "op") if name in _REDUCING else None

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if not tracer.enabled or not tracer.enter():
            return original(*args, **kwargs)
        try:
            op = None
            try:
                info = groups.lookup(_arg(args, kwargs, "group", group_i))
                if info is not None:
                    tensor = _arg(args, kwargs, size_param, size_i) if size_param else None
                    if not device.settled:   # the device NCCL runs on (docs/gpu.md)
                        device.from_tensor(tracer, tensor)
                    peer = _arg(args, kwargs, peer_param, peer_i, -1) if peer_param else -1
                    if not (share.present and _on_cuda(tensor) and share.leaves((info[0], kind, peer))):
                        reduce_op = reduce_op_code(_arg(args, kwargs, "op", op_i)) if op_i is not None else -1
                        op = tracer.begin(kind, name, info[0], tensor_bytes(tensor), info[1], info[2], sequenced,
                                          dtype_flags(tensor), fmt.pack_coll_args(reduce_op, peer if
                                                                                  isinstance(peer, int) else -1))
            except Exception as exc:
                tracer.disable(f"tracing {name} failed: {exc!r}")
            if op is None:
                return original(*args, **kwargs)
            # Inline, not a helper: every frame between the user's call and
            # torch's shows in each traceback the op raises (see _needs_autograd).
            try:
                below = dispatch.below_autograd()
                if below is None or _needs_autograd(args, kwargs):
                    result = original(*args, **kwargs)
                else:
                    with below():
                        result = original(*args, **kwargs)
            except BaseException:
                tracer.finish(op, failed=True)
                raise
            coalescing = getattr(_coalescing, "ops", None)
            if coalescing is not None and coalescing[0] == op.comm_id:
                coalescing[1].append((op, _on_cpu(tensor)))   # ends with the manager's work
            elif result is not None and (always_async or _arg(args, kwargs, "async_op", async_i, False)):
                completion.watcher(tracer).add(op, [result], _on_cpu(tensor))
            else:
                completion.finished(tracer, op)
            return result
        finally:
            tracer.leave()

    return rename(wrapper)


def _needs_autograd(args, kwargs) -> bool:
    """Whether a recorded op must go through autograd; if not, the wrappers
    call it past the C++-issued collectives' kernel (dispatch.py), inline,
    so that a traceback the op raises holds one frame of ours, the wrapper's.

    That kernel sits at the AutogradCPU key; for a call already recorded it
    only hands on, and boxing the call there and back cost 13 us of a 17 us
    traced gloo op (bench/tracer_async_step.py). Below the autograd keys the
    dispatcher goes straight to the op, as torch's own kernels do
    (``AutoDispatchBelowAutograd``). That is the same call exactly when
    autograd had nothing to do: grad mode off (DDP's hooks, FSDP, Megatron's
    autograd functions, the optimizer) or no tensor argument requiring grad.
    Otherwise the call goes through autograd as it would without us."""
    if not _grad_enabled():
        return False
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)):
            if any(getattr(v, "requires_grad", False) or getattr(getattr(v, "tensor", None), "requires_grad", False)
                   for v in value):
                return True
        elif getattr(value, "requires_grad", False):
            return True
    return False


def _wrap_batch(tracer, groups, original, share=hooked.HookShare()):
    @functools.wraps(original)
    def wrapper(p2p_op_list, *args, **kwargs):
        if not tracer.enabled or not tracer.enter():
            return original(p2p_op_list, *args, **kwargs)
        try:
            op = None
            try:
                first = p2p_op_list[0] if p2p_op_list else None
                info = groups.lookup(getattr(first, "group", None))
                if info is not None and not (
                        share.present and _on_cuda(getattr(first, "tensor", None))
                        and share.leaves((info[0], fmt.KIND_P2P, frozenset(getattr(p, "peer", -1)
                                                                          for p in p2p_op_list)))):
                    nbytes = sum(tensor_bytes(getattr(p, "tensor", None)) for p in p2p_op_list)
                    op = tracer.begin(fmt.KIND_P2P, "batch_isend_irecv", info[0], nbytes,
                                      info[1], info[2], False)
            except Exception as exc:
                tracer.disable(f"tracing batch_isend_irecv failed: {exc!r}")
            if op is None:
                return original(p2p_op_list, *args, **kwargs)
            try:   # inline, as in _wrap: no second frame of ours in a traceback
                below = dispatch.below_autograd()
                if below is None or _needs_autograd((p2p_op_list, *args), kwargs):
                    result = original(p2p_op_list, *args, **kwargs)
                else:
                    with below():
                        result = original(p2p_op_list, *args, **kwargs)
            except BaseException:
                tracer.finish(op, failed=True)
                raise
            works = list(result or [])
            if works:
                first = p2p_op_list[0] if p2p_op_list else None
                completion.watcher(tracer).add(op, works, _on_cpu(getattr(first, "tensor", None)))
            else:
                tracer.finish(op)
            return result
        finally:
            tracer.leave()

    return rename(wrapper)


_coalescing = threading.local()   # .ops: (comm_id, [(op, on_cpu)]) inside a coalescing manager


def _wrap_coalescing(tracer, groups, original):
    """``_coalescing_manager``: Megatron's distributed optimizer issues its
    bucketed reduce-scatters and all-gathers under it, batch_isend_irecv its
    p2p ops. Each op inside is recorded under its own name, as the wrapper
    records it, but torch only queues it there: the whole batch goes out as one
    coalesced op when the manager exits, and its work is the manager's. So the
    ops inside end when that work completes (or when the manager returns, for a
    sync one), and the coalesced op itself is not recorded a second time."""

    # Where its arguments sit, looked up once: inspect's bind() per call cost 20 us.
    group_i, async_i = _param_index(original, "group"), _param_index(original, "async_ops")

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        inner = original(*args, **kwargs)
        if not tracer.enabled or tracer.busy():
            return inner     # inside a traced call (batch_isend_irecv): that call is the record
        return _Coalesced(tracer, groups, inner, _arg(args, kwargs, "group", group_i),
                          bool(_arg(args, kwargs, "async_ops", async_i, False)))

    return rename(wrapper)


class _Coalesced:
    """The manager's context, with the ops recorded inside it held until it ends."""

    def __init__(self, tracer, groups, inner, group, async_ops):
        self._tracer, self._groups, self._inner = tracer, groups, inner
        self._group, self._async = group, async_ops
        self._outer = self._manager = None
        self._ops: list = []

    def __enter__(self):
        manager = self._inner.__enter__()
        self._manager = manager
        self._outer = getattr(_coalescing, "ops", None)
        ops = []
        try:
            info = self._groups.lookup(self._group)
            if info is not None:
                _coalescing.ops = (info[0], ops)
        except Exception as exc:
            self._tracer.disable(f"tracing _coalescing_manager failed: {exc!r}")
        self._ops = ops
        return manager

    def __exit__(self, *exc_info):
        _coalescing.ops, ops = self._outer, self._ops
        if not ops:
            return self._inner.__exit__(*exc_info)
        tracer = self._tracer
        entered = tracer.enter()     # the coalesced op the manager now issues is these ops
        try:
            result = self._inner.__exit__(*exc_info)
        except BaseException:
            for op, _ in ops:
                tracer.finish(op, failed=True)
            raise
        finally:
            if entered:
                tracer.leave()
        try:
            works = list(self._manager.works) if self._async else []
            if exc_info[0] is not None:
                for op, _ in ops:
                    tracer.finish(op, failed=True)
            elif works:
                watcher = completion.watcher(tracer)
                for op, on_cpu in ops:
                    watcher.add(op, works, on_cpu)
            else:
                for op, _ in ops:
                    completion.finished(tracer, op)
        except Exception as exc:
            tracer.disable(f"watching a coalesced op failed: {exc!r}")
        return result


def _on_cuda(value) -> bool:
    """True when the op's (first) tensor is a CUDA tensor: its NCCL call is the hook's to see."""
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return bool(getattr(value, "is_cuda", False))


def _on_cpu(value) -> bool:
    """True when the op's (first) tensor is on the CPU: its futures may be waited on."""
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return bool(getattr(value, "is_cpu", False))
