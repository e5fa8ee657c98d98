"""torch.distributed.pipelining, 2 stages (GPipe) on 2 gloo ranks; --stall: rank 1 stops in its stage's
forward. With --cuda, one rank holds both stages on its GPU (interleaved 1F1B: NCCL runs no two ranks
on one GPU)."""
import time

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe, ScheduleInterleaved1F1B, schedules

import fwlib


class Head(torch.nn.Module):
    """Stage 1: the last layer."""

    def __init__(self):
        super().__init__()
        self.out = torch.nn.Linear(64, 1)
        self.calls = 0

    def forward(self, h):
        if fwlib.should_stall(self.calls // MICROBATCHES):
            time.sleep(600)
        self.calls += 1
        return self.out(h)


def load_batch(step):
    fwlib.pace(step)
    return xs[step], ys[step]


def timed_batch_p2p(ops, **kwargs):
    """The schedule's p2p, timed by the script (the truth for the metrics): from a
    batch's issue to its wait() returning. With 2 microbatches, each wait comes
    within one microbatch's compute of the batch's completion."""
    start = time.monotonic()
    works = _batch_p2p(ops, **kwargs)
    issued[id(works)] = start
    return works


def timed_wait_batch_p2p(works):
    _wait_batch_p2p(works)
    start = issued.pop(id(works), None)
    if start is not None:
        fwlib.timed(start)


_batch_p2p, _wait_batch_p2p, issued = schedules._batch_p2p, schedules._wait_batch_p2p, {}
schedules._batch_p2p, schedules._wait_batch_p2p = timed_batch_p2p, timed_wait_batch_p2p
MICROBATCHES = 2
dist.init_process_group(fwlib.BACKEND)
torch.manual_seed(0)
xs, ys = torch.randn(fwlib.STEPS, 8, 32), torch.randn(fwlib.STEPS, 8, 1)
layers = [torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh()), Head()]
device = torch.device(fwlib.DEVICE, fwlib.RANK) if fwlib.CUDA else torch.device("cpu")
mine = range(2) if fwlib.WORLD == 1 else [fwlib.RANK]
stages = [PipelineStage(layers[i].to(device), i, 2, device) for i in mine]
if len(stages) == 2:
    schedule = ScheduleInterleaved1F1B(stages, MICROBATCHES, loss_fn=torch.nn.functional.mse_loss)
else:
    schedule = ScheduleGPipe(stages[0], MICROBATCHES, loss_fn=torch.nn.functional.mse_loss)
params = [p for stage in stages for p in stage.submod.parameters()]
opt = torch.optim.SGD(params, lr=0.05)
for step in range(fwlib.STEPS):
    x, y = (t.to(device) for t in load_batch(step))
    if len(stages) == 2:
        schedule.step(x, target=y)
    elif fwlib.RANK == 0:
        schedule.step(x)
    else:
        schedule.step(target=y)
    opt.step()
    opt.zero_grad()
    fwlib.step_done()
fwlib.save(params)
fwlib.leave()
