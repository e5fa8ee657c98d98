"""DeepSpeed ZeRO-3 on gloo (NCCL with --cuda), started by torchrun or
xpu_timer_launch rather than the deepspeed launcher: an 8-block MLP, the
client's AdamW. --stall: rank 1 stops in its batch loader. --skip: rank 1
skips the loss all-reduce that ends step SKIP_AT (a rank-conditional logging
branch) and runs on into the next step's parameter all-gathers."""
import importlib
import os
import time

import fwlib

if not fwlib.CUDA:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402

if not fwlib.CUDA:
    # On its CPU accelerator DeepSpeed JIT-compiles a shared-memory all-reduce
    # at init_distributed: 20-75 s of g++ on both cores of a fresh 2-core CI
    # machine, again whenever the build flags differ. Only
    # inference_all_reduce (AutoTP inference) calls it; ZeRO-3 training and
    # every collective here go through torch.distributed, as without it.
    # (deepspeed.comm.torch is the module: the package's own ``torch`` name hides it)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

HIDDEN = 64


def load_batch(step):
    if fwlib.should_stall(step):
        time.sleep(600)
    fwlib.pace(step)
    return xs[step].to(fwlib.DEVICE), ys[step].to(fwlib.DEVICE)


def log_loss(loss, step):
    if fwlib.should_skip(step):
        return
    reported = loss.detach().clone()
    dist.all_reduce(reported)


import tracer_ab  # noqa: E402

AB = "--ab" in fwlib.sys.argv and tracer_ab.install() > 0   # under the launcher: the tracer in and out by blocks
fwlib.time_collectives()
if fwlib.CUDA:
    torch.cuda.set_device(fwlib.RANK)
deepspeed.init_distributed(dist_backend=fwlib.BACKEND)
torch.manual_seed(0)
blocks = []
for _ in range(8):
    blocks += [torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh()]
model = torch.nn.Sequential(torch.nn.Linear(32, HIDDEN), *blocks, torch.nn.Linear(HIDDEN, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
config = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
          "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
xs, ys = torch.randn(2, fwlib.STEPS, 8, 32)[fwlib.RANK], torch.randn(2, fwlib.STEPS, 8, 1)[fwlib.RANK]
for step in range(fwlib.STEPS):
    if AB:
        fwlib.traced.append(tracer_ab.at_step(step, 5))
    x, y = load_batch(step)
    loss = torch.nn.functional.mse_loss(engine(x), y)
    engine.backward(loss)
    engine.step()
    log_loss(loss, step)
    fwlib.log_on_stats(loss, step)
    fwlib.step_done()
if AB:
    fwlib.ab_calls.update(tracer_ab.calls())
with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
    fwlib.save([p.detach().clone() for p in engine.module.parameters()])
fwlib.leave()
