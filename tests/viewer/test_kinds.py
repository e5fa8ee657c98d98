"""Colour classes: Python, torch/NCCL/CUDA runtime, libc/kernel, other native; hot vs common."""

import pytest

from viewer.api import NATIVE, PYTHON, Frame
from viewer.kinds import COLOURS, LIBC, OTHER, RUNTIME, colour, is_hot, kind_of


@pytest.mark.parametrize("func, file, kind", [
    ("all_reduce", "torch/distributed/distributed_c10d.py", PYTHON),
    ("c10d::Work::wait", "libtorch_cpu.so", RUNTIME),
    ("ncclCommWaitEvent", "libnccl.so.2", RUNTIME),
    ("cudaMemcpy", "libcudart.so.12", RUNTIME),
    ("gloo::transport::tcp::Loop::run", "", RUNTIME),
    ("___pthread_cond_wait", "pthread_cond_wait.c", LIBC),
    ("__GI___clock_nanosleep", "clock_nanosleep.c", LIBC),
    ("??", "libc.so.6", LIBC),
    ("send_batch", "libtrainer.so", OTHER),
    ("_PyEval_EvalFrameDefault", "libpython3.11.so.1.0", OTHER),
])
def test_kind_of(func, file, kind):
    frame = Frame(func, file, 3 if kind == PYTHON else 0, PYTHON if kind == PYTHON else NATIVE)
    assert kind_of(frame) == kind


def test_hot_is_a_minority_of_the_thread_and_darker():
    assert is_hot(1, 4) and is_hot(8, 16384) and not is_hot(2, 4) and not is_hot(3, 4)
    f = Frame("f", "m.py", 1, PYTHON)
    assert colour(f, True) == COLOURS[PYTHON][1] != colour(f, False) == COLOURS[PYTHON][0]
