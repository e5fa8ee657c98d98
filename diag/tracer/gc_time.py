"""Time spent in Python's garbage collector, for the slow-rank rules.

``gc.callbacks`` bracket every collection. The callback only adds to a
counter: it runs wherever a collection happens, possibly inside the record
writer's lock, so it must never write a record itself. The time is written as
one HOST_FUNC ``END`` named ``gc`` at the next optimizer step (steps.py), so a
rank that pauses in collections shows it in the perf view (docs/slow.md).
"""

from __future__ import annotations

import gc
import time

NAME = "gc"
_t0 = 0
_pending_ns = 0


def _callback(phase: str, _info) -> None:
    global _t0, _pending_ns
    if phase == "start":
        _t0 = time.monotonic_ns()
    elif _t0:
        _pending_ns += time.monotonic_ns() - _t0
        _t0 = 0


def install() -> None:
    if _callback not in gc.callbacks:
        gc.callbacks.append(_callback)


def take() -> int:
    """Collector time since the last call, in ns."""
    global _pending_ns
    ns, _pending_ns = _pending_ns, 0
    return ns
