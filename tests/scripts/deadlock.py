"""A collective skipped (or added) on one group while the job goes on in
another: the commonest deadlock of real training code (issue 41).

Each step all-reduces the "gradients" on the world group, then the loss on a
second group ``stats`` (and, with ``--groups 3``, a tensor-parallel-like
group between them). At step ``--at`` rank ``--rank`` breaks the order:

- ``skip-default``: skips the world all-reduce and goes on to ``stats``;
- ``skip-stats``: skips the ``stats`` all-reduce and goes on to the next step;
- ``extra-stats``: runs a second ``stats`` all-reduce the others do not.

``async-compute`` is healthy though its waits cross: at that step the other
ranks run ``stats`` first, while rank ``--rank`` starts the world all-reduce
async, computes for ``--compute-s`` and only then joins ``stats``.

Every rank then blocks in a collective whose missing members are blocked in
another: nothing can move again. ``--healthy`` runs the same loop unbroken.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import exitlib  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--mode", default="skip-default", choices=["skip-default", "skip-stats", "extra-stats", "healthy",
                                                       "async-compute"])
ap.add_argument("--at", type=int, default=10, help="the step (from 1) at which the order breaks")
ap.add_argument("--rank", type=int, default=1, help="the rank that breaks it")
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--groups", type=int, default=2, choices=[2, 3])
ap.add_argument("--step-s", type=float, default=0.02)
ap.add_argument("--compute-s", type=float, default=8.0)
ap.add_argument("--busy-share", type=float, default=1.0,
                help="the share of each 100 ms the async-compute rank computes (the rest it sleeps): far above "
                     "the agent's busy threshold (5%% of a core) is busy all the same, at less CPU")
args = ap.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
stats = dist.new_group(list(range(world)), group_desc="stats")
tensor = dist.new_group(list(range(world)), group_desc="tensor") if args.groups == 3 else None
grads, loss, act = torch.ones(256), torch.ones(1), torch.ones(16)
for step in range(1, args.steps + 1):
    broken = args.mode != "healthy" and step == args.at and rank == args.rank
    time.sleep(args.step_s)                     # the step's compute
    if tensor is not None:
        dist.all_reduce(act, group=tensor)
    if broken:
        os.write(1, f"BREAK rank {rank} step {step} {args.mode}\n".encode())
    if args.mode == "async-compute" and step == args.at:
        if rank == args.rank:
            work = dist.all_reduce(grads, async_op=True)
            x, end = torch.ones(64, 64), time.monotonic() + args.compute_s
            while time.monotonic() < end:           # busy: its waits may still end
                busy_until = time.monotonic() + 0.1 * args.busy_share
                while time.monotonic() < busy_until:
                    x = (x @ x).clamp_(-1, 1)
                time.sleep(0.1 * (1 - args.busy_share))
            dist.all_reduce(loss, group=stats)
            work.wait()
        else:
            dist.all_reduce(loss, group=stats)
            dist.all_reduce(grads)
        continue
    if not (broken and args.mode == "skip-default"):
        dist.all_reduce(grads)
    if not (broken and args.mode == "skip-stats"):
        dist.all_reduce(loss, group=stats)
    if broken and args.mode == "extra-stats":
        dist.all_reduce(loss, group=stats)
os.write(1, f"DONE rank {rank}\n".encode())
exitlib.leave(dist)
