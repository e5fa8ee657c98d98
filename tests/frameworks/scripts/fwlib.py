"""What the framework scripts share: their argv, the pace, the planted stall,
the truth they time themselves and the file they leave.

argv: ``OUT_DIR [--stall | --skip | --skip-cross] [--steps N] [--untimed] [--unpaced]
[--cuda]``. Each rank writes ``OUT_DIR/rank<R>.json`` at the end: ``sha256``
of its final parameters (bitwise comparison with the same ranks without
xpu-diag), ``steps`` (monotonic time at the end of each step) and ``comms``
(``[start, end]`` of each collective the script timed, monotonic). Before the
stall, the stalled rank prints ``STALL <unix time>``.
``--untimed``: no timing of collectives (and no DDP comm hook): the job as its
user wrote it. ``--unpaced``: no pace (below): the same computation without
the waits that only shape its timing (the bitwise reference). ``--cuda``: on
the GPU with NCCL (tests/gpu/test_frameworks_gpu.py).
"""
import functools
import hashlib
import json
import os
import sys
import threading
import time

OUT = sys.argv[1]
STALL = "--stall" in sys.argv[2:]
TIMED = "--untimed" not in sys.argv[2:]
PACED = "--unpaced" not in sys.argv[2:]
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
CUDA = "--cuda" in sys.argv[2:]
DEVICE, BACKEND = ("cuda", "nccl") if CUDA else ("cpu", "gloo")
# 3-6 s of steps: the metrics test needs its 1 s window (and 1 s of publishing lag) inside them
STEPS = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 100
STALL_AT = 4       # the step before which rank 1 stalls with --stall
PACE_S = 0.03
# Every collective torch.distributed offers in Python, by the names frameworks call.
COLLECTIVES = ("all_reduce", "broadcast", "barrier", "reduce", "all_gather", "all_gather_single",
               "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor",
               "all_to_all", "all_to_all_single", "gather", "scatter")
comms: list = []
steps: list = []
traced: list = []   # per step with --ab (tracer_ab.py): whether the tracer was in
ab_calls: dict = {}  # with --ab: tracer_ab.calls(), set before save()
_inside = threading.local()


def time_collectives() -> None:
    """Time every collective issued through torch.distributed's Python functions
    (by the script or its framework), from the call to its completion."""
    if not TIMED:
        return
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d
    for name in COLLECTIVES:
        original = getattr(c10d, name, None)
        if original is not None:
            setattr(c10d, name, _timer(original))
            if getattr(dist, name, None) is original:
                setattr(dist, name, getattr(c10d, name))


def _timer(original):
    @functools.wraps(original)
    def timed_call(*args, **kwargs):
        if getattr(_inside, "yes", False):   # one collective calling another: timed once
            return original(*args, **kwargs)
        _inside.yes, start = True, time.monotonic()
        try:
            work = original(*args, **kwargs)
        finally:
            _inside.yes = False
        timed(start, work)
        return work
    return timed_call


def pace(step: int) -> None:
    """User-side work that takes turns: each step one rank comes 30 ms late,
    so the other waits for it in a collective (a wait share both ranks have)."""
    if PACED and step % 2 == RANK % 2:
        time.sleep(PACE_S)


SKIP = "--skip" in sys.argv[2:]
SKIP_CROSS = "--skip-cross" in sys.argv[2:]
SKIP_AT = 3        # the step whose last collective rank 1 skips with --skip (--skip-cross)
_stats: list = []  # --skip-cross: the logging group


def should_skip(step: int) -> bool:
    """--skip: rank 1 skips the collective that ends step SKIP_AT (a
    rank-conditional logging branch) and runs on into the next step."""
    if SKIP and RANK == 1 and step == SKIP_AT:
        os.write(1, f"SKIP {time.time()}\n".encode())
        return True
    return False


def log_on_stats(value, step: int) -> None:
    """--skip-cross: each step ends with ``value`` all-reduced on a logging
    group of every rank ("stats", as a metrics logger makes its own); rank 1
    skips it at SKIP_AT and runs on into the framework's own collectives,
    which the others, waiting in "stats", never reach: a deadlock across two
    groups. Without --skip-cross, nothing: the job is the one measured."""
    if not SKIP_CROSS:
        return
    import torch.distributed as dist
    if not _stats:
        _stats.append(dist.new_group(list(range(WORLD)), group_desc="stats"))
    if RANK == 1 and step == SKIP_AT:
        os.write(1, f"SKIP {time.time()}\n".encode())
        return
    dist.all_reduce(value.detach().reshape(1).clone(), group=_stats[0])


def should_stall(step: int) -> bool:
    if STALL and RANK == 1 and step == STALL_AT:
        os.write(1, f"STALL {time.time()}\n".encode())  # one write: the ranks share stdout
        return True
    return False


def timed(start: float, work=None) -> None:
    """Record a collective that started at ``start``: done now, or when
    ``work``'s future completes (no future: end unknown, recorded as None)."""
    if work is None:
        comms.append([start, time.monotonic()])
        return
    try:
        future = work.get_future()
    except RuntimeError:
        comms.append([start, None])
        return
    future.add_done_callback(lambda _f: comms.append([start, time.monotonic()]))


def step_done() -> None:
    steps.append(time.monotonic())


def save(tensors) -> None:
    digest = hashlib.sha256()
    for t in tensors:
        digest.update(t.detach().cpu().contiguous().numpy().tobytes())
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, f"rank{RANK}.json"), "w") as f:
        json.dump({"sha256": digest.hexdigest(), "steps": steps, "comms": comms, "traced": traced, "ab_calls": ab_calls}, f)


def leave() -> None:
    """End the job, its group first, then the exit handlers, without the
    interpreter's teardown, where torch 2.13's gloo aborts a finished worker
    now and then, under plain torchrun too (tests/scripts/exitlib.py says why
    and which tests keep the teardown)."""
    import atexit
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

