"""The tracer wrapper's cost on a device op it leaves to the hook
(diag/tracer/hooked.py), against a bare call, in one process on CPU (gloo).

The op's tensor is a stand-in that answers what the wrapper asks of a CUDA
tensor, the original is a no-op, and the hook always records: what is timed
is the wrapper's own path once a group's first ops were recorded. Prints
ns a call both ways.

    .venv/bin/python bench/tracer_hook_share.py [--calls 50000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from diag.common.net import free_port  # noqa: E402


class CudaLike:
    """What the wrapper reads of a CUDA tensor."""
    is_cuda, is_cpu, dtype, device = True, False, None, None

    def numel(self) -> int:
        return 256

    def element_size(self) -> int:
        return 4


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=50000)
    args = p.parse_args()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from diag.records import format as fmt
    from diag.records.writer import RecordWriter
    from diag.tracer import collectives, device, hooked
    from diag.tracer.core import Tracer

    dist.init_process_group("gloo")
    group = dist.new_group([0])
    shm = tempfile.mkdtemp(prefix="xpu_diag-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        tracer = Tracer(RecordWriter(shm, producer=fmt.PRODUCER_PYTHON, rank=0, local_rank=0, world_size=1), 0)
        device.settled = True   # the device is named on a real job's first op

        def bare(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
            return None

        wrapped = collectives._wrap(tracer, collectives.GroupInfo(c10d, tracer), bare, "all_reduce",
                                    fmt.KIND_COLLECTIVE, "tensor", hooked.HookShare(lambda: 1))
        t = CudaLike()
        for _ in range(hooked.TIE_OPS):     # the group's first ops, recorded for the agent's tie
            wrapped(t, group=group)
        for name, fn in (("bare", bare), ("left to the hook", wrapped)):
            t0 = time.perf_counter_ns()
            for _ in range(args.calls):
                fn(t, group=group)
            print(f"{name:20s} {(time.perf_counter_ns() - t0) / args.calls:8.0f} ns a call")
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
