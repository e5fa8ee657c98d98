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

from diag.common import envnames

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


def tie_to_this_process(env: dict) -> dict:
    """``env`` for a child that is to die with this process: it ties itself
    (:func:`die_with_launcher`) once it runs.

    Not a ``preexec_fn``: the launcher runs gRPC's threads (its agent), and a
    ``preexec_fn`` makes Python fork the whole process, so gRPC's fork
    handlers run in the child between fork and exec. Two of three torchtitan
    jobs under the launcher lost a worker that way (SIGSEGV, SIGABRT after
    gRPC's "epoll_wait error: Bad file descriptor"); without one, Python
    starts the child with vfork and nothing runs before the exec."""
    return {**env, envnames.DIE_WITH_PID: str(os.getpid())}


def die_with_launcher(sig: int, env=os.environ) -> None:
    """In a child started with :func:`tie_to_this_process`'s environment (a
    worker, the collector): ``sig`` when that process dies, SIGKILL included.
    A child of a child (a data loader, a compile worker) inherits the
    variable and is left alone: its parent is not that process. One whose
    parent died before the tie exits at once: nothing would signal it."""
    try:
        parent = int(env.get(envnames.DIE_WITH_PID, ""))
    except ValueError:
        return
    if os.getppid() != parent:
        if not _alive(parent):
            os._exit(1)
        return
    die_with_parent(sig)
    if os.getppid() != parent:   # it died between the check and the prctl
        os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
