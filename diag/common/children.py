"""Child processes that must not outlive the process that started them."""

from __future__ import annotations


def die_with_parent() -> None:
    """``preexec_fn``: SIGTERM the child when the thread that started it
    dies (PR_SET_PDEATHSIG), so no collector or relay outlives its launcher
    or agent, even one killed with SIGKILL."""
    try:
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass
