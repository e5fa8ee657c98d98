"""A 4-rank gloo training loop in which one rank stalls before a collective.

Run it under xpu_timer_launch (examples/demo.py does):

    xpu_timer_launch --nproc-per-node 4 --hang-timeout 10s examples/train_stall.py

Every rank trains a small model and all-reduces its gradients each step. At
step ``--stall-step`` rank ``--stall-rank`` spends ``--stall-seconds`` in
``load_next_batch`` (a stand-in for a stuck data loader), so the other ranks
wait in all_reduce: the hang that the collector should catch and explain.
It only stalls on the first attempt (TORCHELASTIC_RESTART_COUNT 0), so a
restarted job finishes. The script knows nothing about xpu-diag.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist


def load_next_batch(rank: int, step: int, stall: bool, seconds: float) -> torch.Tensor:
    if stall:
        print(f"train_stall: rank {rank} stuck in load_next_batch at step {step} "
              f"for {seconds:.0f} s ({time.strftime('%H:%M:%S')})", flush=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:  # stuck, as a hung reader would be
            time.sleep(0.1)
    generator = torch.Generator().manual_seed(rank * 1000 + step)
    return torch.randn(16, 32, generator=generator)


def train(args) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        stall = first_attempt and rank == args.stall_rank and step == args.stall_step
        batch = load_next_batch(rank, step, stall, args.stall_seconds)
        optimizer.zero_grad()
        loss = model(batch).pow(2).mean()
        loss.backward()
        for param in model.parameters():
            dist.all_reduce(param.grad)
            param.grad /= dist.get_world_size()
        optimizer.step()
        time.sleep(args.step_seconds)
    if rank == 0:
        print(f"train_stall: {args.steps} steps done, last loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--stall-rank", type=int, default=2)
    p.add_argument("--stall-step", type=int, default=5)
    p.add_argument("--stall-seconds", type=float, default=30.0)
    return p.parse_args(argv)


if __name__ == "__main__":
    train(parse_args())
