"""Colour a frame by kind and by how many ranks share it.

Kinds: Python; torch/NCCL/CUDA runtime; libc/kernel; other native. "Hot"
frames (held by a minority of their thread's ranks) get the saturated shade,
common frames the pale one, so the odd rank out stands out at a glance.
"""

from __future__ import annotations

import re

from viewer.api import NATIVE, PYTHON, ROOT, THREAD, Frame

RUNTIME, LIBC, OTHER = "runtime", "libc", "native"

_RUNTIME = re.compile(r"(^|[^a-z]|lib)(torch|c10|at::|aten|nccl|cuda|cublas|cudnn|gloo|caffe2|triton|nvrtc)",
                      re.I)
_LIBC_FILE = re.compile(r"^(libc[.-]|libpthread|ld-linux|libm[.-]|libdl|libstdc\+\+|libgcc|"
                        r"\[kernel|\[vdso|vmlinux)|\.S$|^(sysdeps|nptl)")
# glibc's internal names carry any number of leading underscores (___pthread_cond_wait).
_LIBC_FUNC = re.compile(r"^_*(GI_|libc|start_thread$|clone3?$|syscall|epoll|poll|futex|pthread|nanosleep|"
                        r"clock_nanosleep|sem_|read$|write$|recv(msg|from)?$|send(msg|to)?$|accept4?$|select$|sched_yield|"
                        r"condvar|lll_|do_futex|_start$)")

# (pale, saturated) per kind.
COLOURS = {
    PYTHON: ("#bfe3b4", "#2e8b37"),
    RUNTIME: ("#cfc8ef", "#6247aa"),
    LIBC: ("#f4d9b0", "#d9661f"),
    OTHER: ("#f3c0bd", "#c0392b"),
    THREAD: ("#d9d9d9", "#8c8c8c"),
    ROOT: ("#ececec", "#ececec"),
}
LEGEND = ((PYTHON, "Python"), (RUNTIME, "torch/NCCL/CUDA"), (LIBC, "libc/kernel"), (OTHER, "other native"))


def kind_of(frame: Frame) -> str:
    """PYTHON, RUNTIME, LIBC, OTHER, THREAD or ROOT."""
    if frame.kind != NATIVE:
        return frame.kind
    if _RUNTIME.search(frame.file) or _RUNTIME.search(frame.func):
        return RUNTIME
    if _LIBC_FILE.search(frame.file) or _LIBC_FUNC.match(frame.func):
        return LIBC
    return OTHER


def is_hot(width: int, thread_width: int) -> bool:
    """Few ranks: less than half of the ranks that have this thread."""
    return width * 2 < thread_width


def colour(frame: Frame, hot: bool) -> str:
    return COLOURS[kind_of(frame)][1 if hot else 0]
