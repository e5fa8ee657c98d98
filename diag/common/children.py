"""Child processes that must not outlive the process that started them.

PR_SET_PDEATHSIG has the kernel signal a child when its parent dies, even
by SIGKILL, where nothing of the parent runs any more. It fires when the
*thread* that forked the child ends, not the process: children must be
started by a thread that lives as long as they should (the main thread, or
a keeper thread that stops them before it ends).
"""

from __future__ import annotations

import os
import signal

PR_SET_PDEATHSIG = 1


def _load_prctl():
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):   # not Linux: children may outlive us
        return None


# Looked up in the parent: a child between fork and exec must load and
# import nothing (another thread may have held the import lock at the fork).
_PRCTL = _load_prctl()


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In the child: ``sig`` when the thread that started it dies. Never raises."""
    try:
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, int(sig))
    except Exception:
        pass


def dies_with_this_thread(sig: int = signal.SIGTERM):
    """A ``preexec_fn`` for a child that gets ``sig`` when the calling thread
    (and so this process) dies. A parent that died between the fork and the
    prctl would never signal it: the child sees it has another parent by
    then and exits at once, before it execs."""
    parent = os.getpid()

    def preexec() -> None:
        die_with_parent(sig)
        if os.getppid() != parent:
            os._exit(1)
    return preexec
