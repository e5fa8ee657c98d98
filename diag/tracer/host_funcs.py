"""User-named host functions: XPU_TIMER_HOST_TRACING_FUNC=module@object@function,...

``object`` may be empty (``module@@function``) for a module-level function, or
a class name for a method. Each call is one HOST_FUNC op on comm_id 0 with no
sequence number (host functions are not on a communicator). A module not yet
imported is patched when it is.
"""

from __future__ import annotations

import functools
import sys

from diag.common.host_func_spec import HostFunc, HostFuncSpecError, parse_spec
from diag.records import format as fmt
from diag.tracer import import_hooks
from diag.tracer.marks import MARK, rename


def install(tracer, text: str) -> None:
    try:
        specs = parse_spec(text)
    except HostFuncSpecError as exc:
        sys.stderr.write(f"xpu-diag tracer: {exc}; host functions are not traced\n")
        return
    for spec in specs:
        import_hooks.when_imported(spec.module, functools.partial(_patch, tracer, spec))


def _patch(tracer, spec: HostFunc, module) -> None:
    try:
        owner = getattr(module, spec.obj) if spec.obj else module
        raw = owner.__dict__.get(spec.function) if isinstance(owner, type) else None
        if isinstance(raw, (staticmethod, classmethod)):
            setattr(owner, spec.function, type(raw)(wrap(tracer, raw.__func__, spec.label)))
        else:
            setattr(owner, spec.function,
                    wrap(tracer, getattr(owner, spec.function), spec.label))
    except Exception as exc:
        sys.stderr.write(f"xpu-diag tracer: cannot trace {spec.module}@{spec.obj}@"
                         f"{spec.function}: {exc!r}\n")


def wrap(tracer, fn, label: str):
    if getattr(fn, MARK, None) is not None:
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not tracer.enabled:
            return fn(*args, **kwargs)
        try:
            op = tracer.begin(fmt.KIND_HOST_FUNC, label, sequenced=False)
        except Exception as exc:
            tracer.disable(f"tracing {label} failed: {exc!r}")
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            tracer.finish(op, failed=True)
            raise
        tracer.finish(op)
        return result

    setattr(wrapper, MARK, fn)
    return rename(wrapper)
