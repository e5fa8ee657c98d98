"""The CUDA side of a snapshot's copy, in plain functions: reading away the
error a failed cudaHostRegister leaves behind, naming a cudart error, and
one call for all of a snapshot's copies (diag/recover/snapshot.py uses them)."""

from __future__ import annotations

import torch

HOST_REGISTER_PORTABLE = 1     # cudaHostRegisterPortable: pinned for every context of the process


def cuda_error_name(err) -> str:
    """cudaGetErrorString of a cudart result (torch's enum names only
    success: any other prints as "cudaError.???")."""
    try:
        return str(torch.cuda.cudart().cudaGetErrorString(err))
    except Exception:     # not callable with it: the int code alone names it
        return "see cudaError_t"


def clear_cuda_error() -> bool:
    """Read away the thread's CUDA "last error" that a failed cudart call
    (cudaHostRegister) leaves behind. Not cleared, torch's next kernel-launch
    check (cudaGetLastError) reports it as its own failure: on the H100 the
    snapshot thread's first checksum kernel then raised "invalid argument".
    True when a launch succeeds afterwards."""
    get = getattr(torch.cuda.cudart(), "cudaGetLastError", None)
    if get is not None:
        try:
            get()
        except Exception:
            pass
    for _ in range(3):
        try:   # a launch: torch's check after it reads (and so clears) a stale error, raising it once
            torch.empty(1, dtype=torch.uint8, device=torch.cuda.current_device()).fill_(0)
            return True
        except Exception:
            continue
    return False


_FOREACH_OK = True


def copy_all(dsts: list, srcs: list, non_blocking: bool) -> None:
    """One call for every copy: the loop runs in C++ with the GIL released
    once, not ~600 times against the training thread's Python."""
    if not dsts:
        return
    global _FOREACH_OK
    foreach = getattr(torch, "_foreach_copy_", None)
    if foreach is not None and _FOREACH_OK:
        try:
            foreach(dsts, srcs, non_blocking=non_blocking)
            return
        except (RuntimeError, TypeError):   # a torch that refuses mixed devices: one by one from now on
            _FOREACH_OK = False
    for dst, src in zip(dsts, srcs):
        dst.copy_(src, non_blocking=non_blocking)
