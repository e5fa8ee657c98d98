"""FSDP2 fully_shard on gloo (NCCL with --cuda); --stall: rank 1 stops in its batch loader."""
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import fwlib


def load_batch(step):
    if fwlib.should_stall(step):
        time.sleep(600)
    fwlib.pace(step)
    return xs[step].to(fwlib.DEVICE), ys[step].to(fwlib.DEVICE)


fwlib.time_collectives()
dist.init_process_group(fwlib.BACKEND)
if fwlib.CUDA:
    torch.cuda.set_device(fwlib.RANK)
torch.manual_seed(0)
xs, ys = torch.randn(2, fwlib.STEPS, 8, 32)[fwlib.RANK], torch.randn(2, fwlib.STEPS, 8, 1)[fwlib.RANK]
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                            torch.nn.Linear(64, 1)).to(fwlib.DEVICE)
mesh = init_device_mesh(fwlib.DEVICE, (fwlib.WORLD,))
for module in (model[0], model[2], model[4], model):
    fully_shard(module, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(fwlib.STEPS):
    x, y = load_batch(step)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    opt.zero_grad()
    fwlib.step_done()
fwlib.save(p.to_local() for p in model.parameters())
fwlib.leave()
