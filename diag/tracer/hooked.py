"""Device collectives left to the C++ hook once their group can be tied.

On CUDA tensors the hook (kernel_hook/, preloaded by the launcher) records
every NCCL call from C++, and the agent reports a group's lanes from the
hook's records once it has tied the hook's communicator to the group
(diag/agent/comms.py): from then on the tracer's records of the same calls
are shadowed, read by nobody. Writing them cost the training thread 25 to
35 us a call on an H100 host, against 1.5 us for a bare Python wrapper
(docs/gpu-runs/h100x1/s16-tracer/): most of a Megatron step's tracer cost.

So the tracer records a device op only while the tie may still need it:
the first ``TIE_OPS`` ops of each (group, lane, peers: each peer pair has
its own NCCL communicator), and every op while
the hook does not record (not loaded: ``--no-hook``; not started yet;
switched off; bypassed), which it asks the hook on each call past the first
ones. Every rank counts the same calls, so their tracer seqs stay alike.
The group's name (its GROUP record) is written on its first op either way.

CPU tensors (gloo) are never left: no hook sees them.
"""

from __future__ import annotations

import ctypes
import time

TIE_OPS = 16     # per key: the agent ties on the first op whose span holds the hook's START;
#                 the rest are spares for starts that overlapped another group's span. Few:
#                 a key called once a step (a bucket's all-gather) is recorded for that many steps
ASK_EVERY_NS = 50_000_000   # the hook's answer is kept this long: a clock read costs less than the call


class HookShare:
    """Which device ops the tracer may leave to the hook (see the module docstring)."""

    def __init__(self, recording=None):
        # The hook's xpu_timer_hook_recording(), or None when no hook is in this process.
        self._recording = recording
        self._seen: dict = {}
        self._asked_ns = -ASK_EVERY_NS
        self._answer = False

    @property
    def present(self) -> bool:
        return self._recording is not None

    def leaves(self, key) -> bool:
        """True when the op of ``key`` (comm id, kind, peers) is the hook's alone."""
        if self._recording is None:
            return False
        seen = self._seen.get(key, 0)
        if seen < TIE_OPS:
            self._seen[key] = seen + 1
            return False
        now = time.monotonic_ns()
        if now - self._asked_ns >= ASK_EVERY_NS:
            self._asked_ns, self._answer = now, self._recording() != 0
        return self._answer


_share = None


def find() -> HookShare:
    """The one share of this process (its counts outlive a re-patch): the
    hook's control where the hook is loaded."""
    global _share
    if _share is None:
        _share = _find()
    return _share


def _find() -> HookShare:
    try:
        # The process's global symbols, where a preloaded hook's are. PyDLL: the
        # call keeps the GIL, a trivial C read needs no hand-over and back.
        fn = ctypes.PyDLL(None).xpu_timer_hook_recording
    except (OSError, AttributeError):
        return HookShare(None)
    fn.restype, fn.argtypes = ctypes.c_int, []
    return HookShare(fn)
