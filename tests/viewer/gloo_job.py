"""Test helper: a real 4-rank gloo job with rank 2 stalled, dumped by real py-spy.

Each rank is dumped with ``py-spy dump --native --json`` (and ``eu-stack -p``
where elfutils is installed) into an event directory named as the collector
names it (docs/event-dir.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from diag.common.net import free_port

TARGET = Path(__file__).parent / "targets" / "stalled_gloo.py"
WORLD = 4
STALLED = 2


def py_spy() -> str | None:
    return shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


def _parked_dump(pid: int, rank: int, deadline: float) -> bytes:
    """py-spy dump of a rank once it sits where it will stay (in gloo's wait, or asleep)."""
    marker = b"stall_before_all_reduce" if rank == STALLED else b"c10d::Work::wait"
    while True:
        out = subprocess.run([py_spy(), "dump", "--native", "--json", "--pid", str(pid)],
                             capture_output=True, timeout=120)
        if out.returncode == 0 and marker in out.stdout:
            return out.stdout
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank} never parked: {out.stderr.decode()[-500:]}")
        time.sleep(0.5)


def make_event(event_dir: Path, ready_dir: Path, timeout: float = 120.0) -> None:
    """Start the job, wait until every rank is parked, dump each rank, kill the job."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1")
    logs = [ready_dir / f"rank{r}.log" for r in range(WORLD)]  # a file: a full pipe would block a rank
    procs = []
    for r in range(WORLD):
        with logs[r].open("wb") as log:
            procs.append(subprocess.Popen([sys.executable, str(TARGET), str(ready_dir)],
                                          env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                                          stdout=subprocess.DEVNULL, stderr=log))
    try:
        deadline = time.monotonic() + timeout
        while len(list(ready_dir.glob("ready-*"))) < WORLD:
            dead = [r for r, p in enumerate(procs) if p.poll() is not None]
            if dead:
                raise RuntimeError(f"rank {dead[0]} exited early: {logs[dead[0]].read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError("gloo ranks did not start in time")
            time.sleep(0.2)
        event_dir.mkdir(parents=True, exist_ok=True)
        for r, p in enumerate(procs):
            (event_dir / f"rank{r:05d}-of-{WORLD:05d}.py.json").write_bytes(_parked_dump(p.pid, r, deadline))
            if shutil.which("eu-stack"):  # the native view then comes from eu-stack, all threads
                eu = subprocess.run(["eu-stack", "-p", str(p.pid)], capture_output=True, timeout=120, check=True)
                (event_dir / f"rank{r:05d}-of-{WORLD:05d}.eu-stack.txt").write_bytes(eu.stdout)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=30)
