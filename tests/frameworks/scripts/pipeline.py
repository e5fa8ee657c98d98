"""torch.distributed.pipelining, 2 stages (GPipe) on gloo; --stall: rank 1 stops in its stage's forward."""
import time

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe, schedules

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
    fwlib.timed(issued.pop(id(works)))


_batch_p2p, _wait_batch_p2p, issued = schedules._batch_p2p, schedules._wait_batch_p2p, {}
schedules._batch_p2p, schedules._wait_batch_p2p = timed_batch_p2p, timed_wait_batch_p2p
MICROBATCHES = 2
dist.init_process_group("gloo")
torch.manual_seed(0)
xs, ys = torch.randn(fwlib.STEPS, 8, 32), torch.randn(fwlib.STEPS, 8, 1)
layers = [torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh()), Head()]
stage = PipelineStage(layers[fwlib.RANK], fwlib.RANK, 2, torch.device("cpu"))
schedule = ScheduleGPipe(stage, MICROBATCHES, loss_fn=torch.nn.functional.mse_loss)
opt = torch.optim.SGD(stage.submod.parameters(), lr=0.05)
for step in range(fwlib.STEPS):
    x, y = load_batch(step)
    if fwlib.RANK == 0:
        schedule.step(x)
    else:
        schedule.step(target=y)
    opt.step()
    opt.zero_grad()
    fwlib.step_done()
fwlib.save(stage.submod.parameters())
dist.destroy_process_group()
