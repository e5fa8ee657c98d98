"""A small gloo training loop for the performance view's tests.

Each step: a forward/backward of a linear model, an all_reduce of 1 MiB,
optimizer.step(). Rank 1 sleeps SLOW_MS more per step, so rank 0 waits for it
inside the all_reduce: rank 0's wait share is the higher one. Runs until the
file STOP_FILE exists (or 120 s).
"""
import os, sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
grad = torch.ones(256 * 1024)                       # 1 MiB of float32
slow_s = float(os.environ.get("SLOW_MS", "20")) / 1e3
stop, deadline = os.environ["STOP_FILE"], time.monotonic() + 120
step = 0
while time.monotonic() < deadline:
    model(torch.randn(8, 64)).sum().backward()
    if rank == 1:
        time.sleep(slow_s)
    dist.all_reduce(grad)
    opt.step()
    opt.zero_grad()
    step += 1
    if step % 10 == 0:
        flag = torch.tensor([1.0 if os.path.exists(stop) else 0.0])
        dist.all_reduce(flag)
        if flag.item() > 0:
            break
print(f"rank {rank} done after {step} steps", flush=True)
dist.destroy_process_group()
# torch 2.13's gloo aborts a finished worker now and then at interpreter
# teardown ("terminate called without an active exception"; 1 run in 6 under
# plain torchrun here, pytorch#179291). The work is done and said: leave
# without the static destructors, so the tests judge the tool, not that race.
sys.stdout.flush()
os._exit(0)
