"""Colour a frame by kind and by how many ranks share it.

Kinds: Python; torch/NCCL/CUDA runtime; libc/kernel; other native. "Hot"
frames (held by a minority of their thread's ranks) get the saturated shade,
common frames the pale one, so the odd rank out stands out at a glance.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

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


# Where library Python lives: the stdlib and site/dist-packages of any install
# (a venv, pyenv, /usr/lib), and frozen or generated modules.
_LIB_PATH = re.compile(r"/lib(64)?/python\d[\d.]*/|[/\\](site|dist)-packages[/\\]|^<")
_LIB_TOP = frozenset(getattr(sys, "stdlib_module_names", ())) | {"torch"}
# The tracer's own wrapper frames (diag/tracer/collectives.py names them): not the user's code.
TRACER_FRAME = "xpu_diag_traced"
# xpu-diag's package, installed beside the viewer (one distribution): its
# tracer runs inside every rank, between the user's call and torch's.
_OWN_PACKAGE = Path(__file__).resolve().parent.parent / "diag"


@functools.lru_cache(maxsize=None)
def _own_files() -> frozenset[str]:
    """xpu-diag's Python files as a dump names them: ``diag/tracer/collectives.py``."""
    return frozenset(f"diag/{p.relative_to(_OWN_PACKAGE).as_posix()}" for p in _OWN_PACKAGE.rglob("*.py"))


def is_ours(path: str, short: str) -> bool:
    """A file of xpu-diag itself, wherever the rank had it (a checkout, a
    venv): the part from its last ``diag/`` is one of our own files."""
    for name in (short, path):
        if not name.startswith("diag/"):
            name = name[name.rfind("/diag/") + 1:] if "/diag/" in name else ""
        if name in _own_files():
            return True
    return False


def is_library(path: str, short: str) -> bool:
    """Not the user's code: a Python file of the stdlib, torch, site-packages
    or xpu-diag, from the dumped path (absolute where py-spy gives it) or
    else its short name."""
    if path.startswith("/") or path.startswith("<"):
        if _LIB_PATH.search(path):
            return True
    elif "site-packages/" in short or "dist-packages/" in short:
        return True
    top = short.split("/", 1)[0]
    top = top[:-3] if top.endswith(".py") else top
    return (top in _LIB_TOP and not (path.startswith("/") and "/" not in short)) or is_ours(path, short)


def user_frame(frames) -> "Frame | None":
    """The innermost Python frame of the user's own code (frames are root
    first): the first from the inside outside the stdlib, torch,
    site-packages and xpu-diag."""
    for f in reversed(frames):
        if f.kind == PYTHON and not f.lib and f.func != TRACER_FRAME:
            return f
    return None


def kind_of(frame: Frame) -> str:
    """PYTHON, RUNTIME, LIBC, OTHER, THREAD or ROOT."""
    if frame.kind != NATIVE:
        return frame.kind
    if _RUNTIME.search(frame.file) or _RUNTIME.search(frame.func):
        return RUNTIME
    if _LIBC_FILE.search(frame.file) or _LIBC_FUNC.match(frame.func):
        return LIBC
    return OTHER


# What a thread blocks in when it waits for work, a peer or a lock.
_WAIT_FUNC = re.compile(r"futex|wait|poll|select|sleep|pause|accept|recv|read$|sem_|lll_lock", re.I)


def is_wait(frame: Frame) -> bool:
    """A libc/kernel frame a thread blocks in (futex, condition variable,
    epoll, sleep, recv); a thread whose innermost frame is one is parked."""
    return kind_of(frame) == LIBC and bool(_WAIT_FUNC.search(frame.func))


def is_hot(width: int, thread_width: int) -> bool:
    """Few ranks: less than half of the ranks that have this thread."""
    return width * 2 < thread_width


def colour(frame: Frame, hot: bool) -> str:
    return COLOURS[kind_of(frame)][1 if hot else 0]
