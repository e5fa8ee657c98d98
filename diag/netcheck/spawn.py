"""``--nproc-per-node K``: start K local netcheck processes through torch.distributed.run.

As xpu_timer_launch does, torchrun runs in this process; its agent serves the
store on --master-addr/--master-port, and each child is one pairing unit
(one GPU) that finds the store through torchrun's environment.
"""

from __future__ import annotations

import sys
from typing import Sequence

from diag.netcheck.config import Config

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
    return ["--nnodes", str(cfg.nnodes), "--node-rank", str(cfg.node_rank), "--master-addr", cfg.master_addr,
            "--master-port", str(cfg.master_port), "--nproc-per-node", str(cfg.nproc_per_node),
            "-m", "diag.netcheck.cli", *child_argv(argv)]


def spawn(cfg: Config, argv: Sequence[str]) -> int:
    """Run the children; their worst exit status (they print the verdicts themselves)."""
    from torch.distributed import run as trun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        trun.run(trun.parse_args(torchrun_argv(cfg, argv)))
        return 0
    except SignalException as exc:  # torchrun has stopped the children already
        print(f"netcheck: node rank {cfg.node_rank}: stopped by signal {exc.sigval}", file=sys.stderr)
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        codes = sorted({f.exitcode for f in exc.failures.values()})
        print(f"netcheck: node rank {cfg.node_rank}: local process(es) exited with status "
              f"{', '.join(map(str, codes))}", file=sys.stderr)
        return max((c for c in codes if c > 0), default=1)
