"""The optimizer's step(), recorded by default: the performance view's step time.

torch.optim's global step hooks (``register_optimizer_step_pre_hook`` /
``_post_hook``) fire for every optimizer, subclasses included, so no method is
patched. Each step is one HOST_FUNC ``END`` record named ``optimizer.step``
with its host duration, and no ``START``: the step is never "in flight", so a
hang inside a collective called from step() is still reported as that
collective, not as the step.
"""

from __future__ import annotations

import threading
import time

from diag.perf.api import DEFAULT_STEP_NAME
from diag.records import format as fmt

_started = threading.local()


def install(tracer, optim_module) -> None:
    try:
        from torch.optim import optimizer as opt
        opt.register_optimizer_step_pre_hook(lambda *_: _pre())
        opt.register_optimizer_step_post_hook(lambda *_: _post(tracer))
    except Exception as exc:  # an older torch: no step time, nothing else lost
        import sys
        sys.stderr.write(f"xpu-diag tracer: optimizer step hooks unavailable ({exc!r}); "
                         f"the performance view has no step time\n")


def _pre() -> None:
    _started.t0 = time.monotonic_ns()


def _post(tracer) -> None:
    t0 = getattr(_started, "t0", None)
    if t0 is None or not tracer.enabled:
        return
    _started.t0 = None
    try:
        tracer.writer.end(0, fmt.KIND_HOST_FUNC, DEFAULT_STEP_NAME, time.monotonic_ns() - t0)
    except Exception as exc:
        tracer.disable(f"writing a record failed: {exc!r}")
