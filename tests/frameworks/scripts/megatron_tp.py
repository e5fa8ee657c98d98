"""Megatron-Core's tensor parallelism on gloo (NCCL with --cuda): its
parallel_state, a ColumnParallelLinear -> RowParallelLinear MLP split over
TP=2, plain Adam. --stall: rank 1 (tp 1) stops in its batch loader.
--skip: rank 1 skips the loss all-gather that ends step SKIP_AT (the way a
rank-conditional logging branch does) and runs on into the next step, whose
first collective (the row-parallel all-reduce) the other rank's all-gather
then waits against: the job hangs."""
import time

import torch
import torch.distributed as dist
from megatron.core import parallel_state, tensor_parallel
from megatron.core.model_parallel_config import ModelParallelConfig

import fwlib

HIDDEN = 64


def load_batch(step):
    if fwlib.should_stall(step):
        time.sleep(600)
    fwlib.pace(step)
    return xs[step].to(fwlib.DEVICE), ys[step].to(fwlib.DEVICE)


def report_loss(loss, step):
    """Every rank's loss, gathered for the log line."""
    if fwlib.should_skip(step):
        return None
    gathered = torch.zeros(fwlib.WORLD, device=loss.device)
    dist.all_gather_into_tensor(gathered, loss.detach().reshape(1),
                                group=parallel_state.get_tensor_model_parallel_group())
    return gathered


fwlib.time_collectives()
dist.init_process_group(fwlib.BACKEND)
if fwlib.CUDA:
    torch.cuda.set_device(fwlib.RANK)
parallel_state.initialize_model_parallel(tensor_model_parallel_size=fwlib.WORLD)
torch.manual_seed(0)
tensor_parallel.model_parallel_cuda_manual_seed(0) if fwlib.CUDA else None
config = ModelParallelConfig(tensor_model_parallel_size=fwlib.WORLD, use_cpu_initialization=True,
                             perform_initialization=True, params_dtype=torch.float32)
init = torch.nn.init.xavier_normal_
fc1 = tensor_parallel.ColumnParallelLinear(32, HIDDEN, config=config, init_method=init, bias=True,
                                           gather_output=False)
fc2 = tensor_parallel.RowParallelLinear(HIDDEN, 1, config=config, init_method=init, bias=True,
                                        input_is_parallel=True, skip_bias_add=False)
if fwlib.CUDA:
    fc1, fc2 = fc1.cuda(), fc2.cuda()
# Every rank feeds the same batch: tensor parallelism splits the model, not the data.
xs, ys = torch.randn(fwlib.STEPS, 8, 32), torch.randn(fwlib.STEPS, 8, 1)
params = list(fc1.parameters()) + list(fc2.parameters())
opt = torch.optim.Adam(params, lr=0.01)
for step in range(fwlib.STEPS):
    x, y = load_batch(step)
    hidden, _ = fc1(x)
    out, _ = fc2(torch.tanh(hidden))
    loss = torch.nn.functional.mse_loss(out, y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    report_loss(loss, step)
    fwlib.log_on_stats(loss, step)
    fwlib.step_done()
fwlib.save(params)
parallel_state.destroy_model_parallel()
fwlib.leave()
