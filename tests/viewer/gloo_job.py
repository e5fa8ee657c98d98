"""Test helper: a real 4-rank gloo job with rank 2 stalled, dumped by real py-spy.

Each rank is dumped with ``py-spy dump --native --json`` (and ``eu-stack -p``
where elfutils is installed) into an event directory named as the collector
names it (docs/event-dir.md).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

TARGET = Path(__file__).parent / "targets" / "stalled_gloo.py"
WORLD = 4
STALLED = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def py_spy() -> str | None:
    return shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


def make_event(event_dir: Path, ready_dir: Path, timeout: float = 120.0) -> None:
    """Start the job, wait until every rank is parked, dump each rank, kill the job."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(TARGET), str(ready_dir)],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for r in range(WORLD)]
    try:
        deadline = time.monotonic() + timeout
        while len(list(ready_dir.glob("ready-*"))) < WORLD:
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"rank exited early: {dead[0].stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError("gloo ranks did not start in time")
            time.sleep(0.2)
        time.sleep(1.5)  # let the waiting ranks get into gloo's blocking wait
        event_dir.mkdir(parents=True, exist_ok=True)
        for r, p in enumerate(procs):
            out = subprocess.run([py_spy(), "dump", "--native", "--json", "--pid", str(p.pid)],
                                 capture_output=True, timeout=120, check=True)
            (event_dir / f"rank{r:05d}-of-{WORLD:05d}.py.json").write_bytes(out.stdout)
            if shutil.which("eu-stack"):  # the native view then comes from eu-stack, all threads
                eu = subprocess.run(["eu-stack", "-p", str(p.pid)], capture_output=True, timeout=120, check=True)
                (event_dir / f"rank{r:05d}-of-{WORLD:05d}.eu-stack.txt").write_bytes(eu.stdout)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=30)
