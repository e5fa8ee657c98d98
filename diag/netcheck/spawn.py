"""``--nproc-per-node K``: start K local netcheck processes through torch.distributed.run.

As xpu_timer_launch does, torchrun runs in this process; its agent serves the
store on --master-addr/--master-port, and each child is one pairing unit
(one GPU) that finds the store through torchrun's environment.

The children never print the verdict or exit non-zero: torchrun kills every
sibling once one exits non-zero, which used to take the coordinator (and the
verdict) with it. Each child hands its document and exit status up through
NETCHECK_SPAWN_DIR; this process prints, writes --output and returns the worst.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Sequence

from diag.netcheck import handoff
from diag.netcheck.api import EXIT_CANNOT_RUN, EXIT_FAULTY, EXIT_HEALTHY, EXIT_INCOMPLETE
from diag.netcheck.check import emit, verdict_code
from diag.netcheck.config import Config

SPAWN_DIR_ENV = "NETCHECK_SPAWN_DIR"

# Rendezvous flags the children must not see: torchrun's env carries them.
_DROP = {"--nnodes": True, "--node-rank": True, "--master-addr": True, "--master-port": True,
         "--nproc-per-node": True}


def child_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` without the rendezvous and --nproc-per-node options (both ``--x v`` and ``--x=v``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _DROP:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


def torchrun_argv(cfg: Config, argv: Sequence[str]) -> list[str]:
    return ["--nnodes", str(cfg.rdzv.nnodes), "--node-rank", str(cfg.rdzv.node_rank), "--master-addr", cfg.rdzv.master_addr,
            "--master-port", str(cfg.rdzv.master_port), "--nproc-per-node", str(cfg.rdzv.nproc_per_node),
            "-m", "diag.netcheck.cli", *child_argv(argv)]


def spawn(cfg: Config, argv: Sequence[str]) -> int:
    """Run the children, then print and write the verdict they handed up; the worst exit status."""
    where = tempfile.mkdtemp(prefix="netcheck-spawn-")
    os.environ[SPAWN_DIR_ENV] = where
    try:
        code = _run_torchrun(cfg, argv)
        doc, codes = handoff.handed_up(where)
    finally:
        os.environ.pop(SPAWN_DIR_ENV, None)
        shutil.rmtree(where, ignore_errors=True)
    if doc is None:
        print(f"netcheck: node rank {cfg.rdzv.node_rank}: no local process reached a verdict", file=sys.stderr)
        return code or EXIT_CANNOT_RUN
    emit(cfg, doc, lead=cfg.rdzv.node_rank == 0)
    worst = max([c for c in codes if c not in (EXIT_HEALTHY, EXIT_FAULTY, EXIT_INCOMPLETE)] + [code], default=0)
    return worst or verdict_code(doc)


def _run_torchrun(cfg: Config, argv: Sequence[str]) -> int:
    from torch.distributed import run as trun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        trun.run(trun.parse_args(torchrun_argv(cfg, argv)))
        return 0
    except SignalException as exc:  # torchrun has stopped the children already
        print(f"netcheck: node rank {cfg.rdzv.node_rank}: stopped by signal {exc.sigval}", file=sys.stderr)
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        codes = sorted({f.exitcode for f in exc.failures.values()})
        print(f"netcheck: node rank {cfg.rdzv.node_rank}: local process(es) exited with status "
              f"{', '.join(map(str, codes))}", file=sys.stderr)
        return max((c for c in codes if c > 0), default=1)
