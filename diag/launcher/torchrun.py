"""Run torch.distributed.run in this process and turn its outcome into a status.

torchrun itself exits 1 (through an uncaught exception) when a worker fails;
we print its failure summary and return 1 the same way, without a traceback.
"""

from __future__ import annotations

import sys


def run(argv: list[str]) -> int:
    from torch.distributed import run as trun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = trun.parse_args(argv)
    try:
        trun.run(args)
        return 0
    except ChildFailedError as exc:
        sys.stderr.write(exc.format_msg() + "\n")
        return 1
    except SignalException as exc:
        sys.stderr.write(f"xpu_timer_launch: stopped by signal {exc.sigval}\n")
        return 128 + int(exc.sigval)
