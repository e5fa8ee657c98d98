"""A framework job's ranks without xpu-diag, forked from one process that has
imported the framework already: the bitwise reference of jobs.healthy.

``python forkrun.py WORLD PORT MODULES SCRIPT ARGS...``: imports MODULES
(comma-separated), then forks WORLD ranks on this host, whose rank 0 hosts
the job's store on PORT. Each gets the
environment torchrun gives its workers and runs ``python SCRIPT ARGS`` as a
fresh interpreter would, its own modules (the scripts' fwlib) imported after
the fork. Exit status: the first rank's that failed (-N for signal N), else 0;
once one fails the others are killed, as torchrun does.

What it saves against plain torchrun: torchrun's own process (a torch import)
and one of the two ranks' imports of torch and the framework (1.5-4 CPU-s
each). What it leaves out: torchrun's agent store (rank 0 hosts the job's
store, TORCHELASTIC_USE_AGENT_STORE=False), its error file, and the
interpreter's teardown at a rank's exit (threads are joined and the exit
handlers run; the parameters are written before). None of them touches what a
rank computes.
"""

from __future__ import annotations

import atexit
import importlib
import os
import runpy
import signal
import sys
import threading


def rank_env(rank: int, world: int, port: str) -> dict:
    """What torchrun (torch 2.13, one node, static rendezvous) adds for worker ``rank``."""
    return dict(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank), ROLE_NAME="default",
                WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world), ROLE_WORLD_SIZE=str(world),
                GROUP_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0", TORCHELASTIC_RUN_ID="none",
                TORCHELASTIC_USE_AGENT_STORE="False", TORCH_NCCL_ASYNC_ERROR_HANDLING="1",
                TORCHELASTIC_SIGNALS_TO_HANDLE="SIGTERM,SIGINT,SIGHUP,SIGQUIT")


def _rank(env: dict, argv: list[str]) -> None:
    """In the forked child: ``python argv...`` as rank env["RANK"]; never returns."""
    os.environ.update(env)
    try:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _status(raw: int) -> int:
    return -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def main(argv: list[str]) -> int:
    world, port, modules, args = int(argv[0]), argv[1], [m for m in argv[2].split(",") if m], argv[3:]
    for module in modules:
        importlib.import_module(module)
    sys.stdout.flush()
    sys.stderr.flush()
    pids = []
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            _rank(rank_env(rank, world, port), args)
        pids.append(pid)
    first = 0
    while pids:
        pid, raw = os.wait()
        pids.remove(pid)
        code = _status(raw)
        if code and not first:
            first = code
            for other in pids:
                os.kill(other, signal.SIGKILL)
    return first


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
