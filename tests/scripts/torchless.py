"""A rank without torch, for jobs whose subject is the launcher, the agent,
the collector or a verdict, not torch (STYLE: a rank that writes its records
through the real writer of diag/records without importing torch).

Under xpu_timer_launch the bootstrap has already made this rank's progress
region (diag.tracer.install_from_env, as in a gloo rank); :func:`all_reduce`
writes its START and END there through the same Tracer and RecordWriter, with
the name, group, seq, size and dtype a gloo all_reduce of ``ELEMENTS``
float32 writes. Between them the ranks meet as a collective does: each posts
its value in a directory every rank of the job shares and waits for all the
others'. A rank that never comes leaves the rest waiting inside
``all_reduce``, as gloo would, and py-spy shows that frame. It costs a tenth
of a gloo rank: no ``import torch``, no process group.

Run under the launcher only: it reads RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, TORCHELASTIC_RUN_ID and TORCHELASTIC_RESTART_COUNT as torchrun
sets them (MASTER_PORT and the restart keep jobs and attempts apart). A job
that ends removes its directory; a killed one's files are older than the
next job's launcher, which tells them apart, and are swept an hour on.
"""

import glob
import os
import re
import shutil
import sys
import tempfile
import time

from diag.records import format as fmt
from diag.tracer import core

ELEMENTS = 8          # what a rank reduces: torch.ones(8), as stall.py's
FLOAT32 = 7           # its NCCL dtype code (diag/tracer/sizes.py)
POLL_S = 0.01

_e = os.environ
rank, world_size = int(_e["RANK"]), int(_e["WORLD_SIZE"])
restart = _e.get("TORCHELASTIC_RESTART_COUNT", "0")
_key = "-".join((_e["MASTER_ADDR"], _e["MASTER_PORT"], _e.get("TORCHELASTIC_RUN_ID", ""), restart))
_dir = os.path.join(tempfile.gettempdir(), "torchless-" + re.sub(r"[^\w.-]", "_", _key))
os.makedirs(_dir, exist_ok=True)
if rank == 0:   # a killed job leaves its directory: swept an hour on (a live one's changes every step)
    for _old in glob.glob(os.path.join(tempfile.gettempdir(), "torchless-*")):
        try:
            if time.time() - os.stat(_old).st_mtime > 3600:
                shutil.rmtree(_old, ignore_errors=True)
        except OSError:
            pass
try:   # a file older than this node's launcher (less a minute for the other nodes') is a killed job's
    _since = os.stat(_e["XPU_TIMER_SHM_DIR"]).st_ctime - 60
except (KeyError, OSError):
    _since = 0.0
_seq = 0
_tracer = core.active()
if _tracer is not None:   # as the tracer's GroupInfo names the default group, once
    _tracer.writer.group(0, "default", rank, world_size)


def _posted(path: str) -> bool:
    try:
        return os.stat(path).st_mtime >= _since
    except OSError:
        return False


def _post(name: str, text: str) -> None:
    tmp = os.path.join(_dir, f".{name}.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(_dir, name))


def all_reduce(value: float) -> float:
    """The sum of every rank's ``value``, once all have posted theirs."""
    return _collective("all_reduce", value, ELEMENTS * 4, (FLOAT32 + 1) << fmt.FLAG_DTYPE_SHIFT, 0)


def barrier() -> None:
    """Once every rank is here; recorded as gloo's barrier is (no bytes, no reduce op)."""
    _collective("barrier", 0.0, 0, 0, -1)


def _collective(name: str, value: float, nbytes: int, flags: int, reduce_op: int) -> float:
    global _seq
    _seq += 1
    tracer = _tracer if _tracer is not None and _tracer.enabled else None
    op = None if tracer is None else tracer.begin(
        fmt.KIND_COLLECTIVE, name, 0, nbytes, rank, world_size, True, flags, fmt.pack_coll_args(reduce_op, -1))
    _post(f"{_seq}.{rank}", repr(value))
    total = 0.0
    for peer in range(world_size):
        path = os.path.join(_dir, f"{_seq}.{peer}")
        while not _posted(path):
            time.sleep(POLL_S)
        with open(path) as f:
            total += float(f.read())
    if op is not None:
        tracer.finish(op)
    if _seq > 1:    # every rank posted this seq, so none reads the one before any more
        os.unlink(os.path.join(_dir, f"{_seq - 1}.{rank}"))
    return total


def step(host_ns: int) -> None:
    """An optimizer step of ``host_ns`` on the host, recorded as the tracer's
    step hook records torch.optim's (diag/tracer/steps.py): one HOST_FUNC END
    named for --perf-step, no START. It gives the step-time series."""
    from diag.perf.api import DEFAULT_STEP_NAME   # here: the other scripts never import it (15 ms)
    if _tracer is not None and _tracer.enabled:
        _tracer.writer.end(0, fmt.KIND_HOST_FUNC, DEFAULT_STEP_NAME, host_ns)


def say(line: str) -> None:
    """One write: the ranks share the launcher's stdout."""
    os.write(1, f"{line}\n".encode())


def leave() -> None:
    """Exit 0 once this job's directory is no longer needed: rank 0 removes
    it when every rank said it is done (or after 10 s)."""
    _post(f"gone.{rank}", "")
    if rank == 0:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(
                _posted(os.path.join(_dir, f"gone.{r}")) for r in range(world_size)):
            time.sleep(POLL_S)
        shutil.rmtree(_dir, ignore_errors=True)
    sys.stdout.flush()
    sys.exit(0)
