"""Framework jobs' ranks without xpu-diag, forked from one process that has
imported the frameworks already: the bitwise references of jobs.healthy.

``python -m tests.frameworks.forkrun AT_ONCE MODULES JOBS`` (from the repository's root): imports MODULES (comma-separated),
then runs the jobs of the JSON file JOBS, AT_ONCE at a time. A job is
``{"world", "port", "argv", "env", "log"}``: ``world`` ranks on this host,
rank 0 hosting the job's store on ``port``, each with exactly ``env`` and
what torchrun adds for its workers, each running ``python *argv`` as a fresh
interpreter would (its own modules, the scripts' fwlib, imported after the
fork), their stdout and stderr in the file ``log``. A job's status is its
first failed rank's (-N for signal N), else 0; once one rank fails the
others are killed, as torchrun does. Prints the statuses, a JSON list in
the jobs' order.

What it saves against plain torchrun: torchrun's own process (a torch import)
and every rank's imports of torch and its framework (1.5-4 CPU-s each). What
it leaves out: torchrun's agent store (rank 0 hosts the job's store,
TORCHELASTIC_USE_AGENT_STORE=False), its error file, and the interpreter's
teardown at a rank's exit (threads are joined and the exit handlers run; the
parameters are written before). None of them touches what a rank computes.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys

from tests import preloaded


def rank_env(rank: int, world: int, port: str) -> dict:
    """What torchrun (torch 2.13, one node, static rendezvous) adds for worker ``rank``."""
    return dict(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank), ROLE_NAME="default",
                WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world), ROLE_WORLD_SIZE=str(world),
                GROUP_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0", TORCHELASTIC_RUN_ID="none",
                TORCHELASTIC_USE_AGENT_STORE="False", TORCH_NCCL_ASYNC_ERROR_HANDLING="1",
                TORCHELASTIC_SIGNALS_TO_HANDLE="SIGTERM,SIGINT,SIGHUP,SIGQUIT")


def _rank(env: dict, argv: list[str]) -> None:
    """In a forked child: ``python argv...`` with exactly ``env``; never returns."""
    os.environ.clear()
    os.environ.update(env)
    preloaded.run_and_exit(argv)


def _wait_all(pids: list[int]) -> int:
    """Reaps ``pids``; the first nonzero status, the rest killed once it comes."""
    first = 0
    while pids:
        pid, raw = os.wait()
        if pid not in pids:
            continue
        pids.remove(pid)
        code = preloaded.status(raw)
        if code and not first:
            first = code
            for other in pids:
                os.kill(other, signal.SIGKILL)
    return first


def _job(job: dict) -> None:
    """In a forked child: the job's ranks, run to the end; exits with its status."""
    log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd in (1, 2):
        os.dup2(log, fd)
    os.close(log)
    pids = []
    for rank in range(job["world"]):
        pid = os.fork()
        if pid == 0:
            _rank(dict(job["env"], **rank_env(rank, job["world"], job["port"])), job["argv"])
        pids.append(pid)
    os._exit(_wait_all(pids) & 0xFF)


def main(argv: list[str]) -> int:
    at_once, modules, path = int(argv[0]), [m for m in argv[1].split(",") if m], argv[2]
    with open(path) as f:
        todo = list(enumerate(json.load(f)))
    for module in modules:
        importlib.import_module(module)
    sys.stdout.flush()
    sys.stderr.flush()
    codes: list = [None] * len(todo)
    running: dict[int, int] = {}      # pid -> the job's index
    while todo or running:
        while todo and len(running) < at_once:
            index, job = todo.pop(0)
            pid = os.fork()
            if pid == 0:
                _job(job)
            running[pid] = index
        pid, raw = os.wait()
        if pid in running:
            code = preloaded.status(raw)
            codes[running.pop(pid)] = code - 256 if code > 127 else code
    print(json.dumps(codes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
