"""Rank 1 skips a collective at step --at and the job crashes (issue 41, item 3).

``--mode two``: two per-parameter all-reduces a step; rank 1 skips the first,
so its second meets the others' first (gloo: data size mismatch). ``--mode
one``: one all-reduce a step; rank 1 skips it, finishes one op short and exits
0, its peers then fail. ``--mode healthy``: the same loop, unbroken.
The skip prints ``BREAK rank 1 step N MODE <unix time>``.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import exitlib  # noqa: E402

mode, at, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
rank = dist.get_rank()
params = [torch.ones(43), torch.ones(2)] if mode == "two" else [torch.ones(256)]
for step in range(1, steps + 1):
    for i, p in enumerate(params):
        if rank == 1 and step == at and i == 0 and mode != "healthy":   # the skip, said with its unix time
            os.write(1, f"BREAK rank {rank} step {step} {mode} {time.time():.3f}\n".encode())
        else:
            dist.all_reduce(p)
print(f"DONE rank={rank}", flush=True)
exitlib.leave(dist)
