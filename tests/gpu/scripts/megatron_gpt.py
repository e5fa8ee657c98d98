"""A small Megatron-Core GPT on GPUs: TP x PP (default 2 x 2 on 4 GPUs), the
distributed optimizer, Megatron's own pipeline schedule, random tokens.

    torchrun|xpu_timer_launch --nproc-per-node 4 megatron_gpt.py OUT_DIR [--steps N]
        [--stall-tp | --stall-pp | --skip-tp]

Each rank writes OUT_DIR/rank<R>.json: the sha256 of its final parameters,
each step's time (ms, CUDA-synchronised) and the torch.distributed calls it
made each step (collectives, and each p2p op, as NCCL counts them).
--stall-tp: rank 1 (tp 1, pp 0) stops in its forward step at STALL_AT.
--stall-pp: rank 2 (tp 0, pp 1) stops in its data iterator at STALL_AT.
--skip-tp: rank 1 skips one tensor-parallel all-reduce at SKIP_AT.
Each planted fault prints PLANTED <what> first.
"""
import functools
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

OUT = sys.argv[1]
ARGS = sys.argv[2:]
STEPS = int(ARGS[ARGS.index("--steps") + 1]) if "--steps" in ARGS else 30
TP = int(os.environ.get("MEGATRON_TP", "2"))
PP = int(os.environ.get("MEGATRON_PP", "2"))
STALL_AT, SKIP_AT = 8, 8
SEQ, MICRO, MICROBATCHES, VOCAB = 128, 2, 4, 1024
RANK, LOCAL = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
calls = [0]


def count_calls():
    """Count the torch.distributed calls the step makes, as NCCL sees them."""
    from torch.distributed import distributed_c10d as c10d

    def counting(original, n):
        @functools.wraps(original)
        def counted(*args, **kwargs):
            calls[0] += n(args, kwargs)
            return original(*args, **kwargs)
        return counted
    one = lambda a, k: 1  # noqa: E731
    for name in ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast",
                 "reduce", "all_to_all_single", "isend", "irecv", "send", "recv", "barrier"):
        original = getattr(c10d, name, None)
        if original is not None:
            wrapped = counting(original, one)
            setattr(c10d, name, wrapped)
            if getattr(dist, name, None) is original:
                setattr(dist, name, wrapped)
    batch = c10d.batch_isend_irecv
    wrapped = counting(batch, lambda a, k: 0)    # its isend/irecv count themselves
    c10d.batch_isend_irecv = dist.batch_isend_irecv = wrapped


sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "frameworks", "scripts"))
import tracer_ab  # noqa: E402

AB = "--ab" in ARGS and tracer_ab.install() > 0   # under the launcher: the tracer in and out by blocks
count_calls()
torch.cuda.set_device(LOCAL)
dist.init_process_group("nccl")
from megatron.core import parallel_state  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.models.gpt.gpt_model import GPTModel  # noqa: E402
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer  # noqa: E402
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func  # noqa: E402
from megatron.core.tensor_parallel import mappings  # noqa: E402
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

parallel_state.initialize_model_parallel(tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP)
torch.manual_seed(123)
model_parallel_cuda_manual_seed(123)
config = TransformerConfig(num_layers=4, hidden_size=256, num_attention_heads=4, use_cpu_initialization=True,
                           pipeline_dtype=torch.float32, tensor_model_parallel_size=TP,
                           pipeline_model_parallel_size=PP)
model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=VOCAB,
                 max_sequence_length=SEQ, pre_process=parallel_state.is_pipeline_first_stage(),
                 post_process=parallel_state.is_pipeline_last_stage()).cuda()
ddp_config = DistributedDataParallelConfig(use_distributed_optimizer=True, overlap_grad_reduce=False)
model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
optimizer = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-4, use_distributed_optimizer=True),
                                   [model])
forward_backward = get_forward_backward_func()
step_now = [0]


def batches():
    g = torch.Generator().manual_seed(7)   # every rank the same tokens: the stages need the same batch
    while True:
        if "--stall-pp" in ARGS and RANK == 2 and step_now[0] == STALL_AT:
            print(f"PLANTED stall in rank {RANK}'s data iterator {time.time()}", flush=True)
            time.sleep(3600)
        tokens = torch.randint(0, VOCAB, (MICRO, SEQ + 1), generator=g)
        yield {"tokens": tokens[:, :-1].cuda(), "labels": tokens[:, 1:].cuda()}


def forward_step(data_iterator, model):
    if "--stall-tp" in ARGS and RANK == 1 and step_now[0] == STALL_AT:
        print(f"PLANTED stall in rank {RANK}'s forward step {time.time()}", flush=True)
        time.sleep(3600)
    data = next(data_iterator)
    position_ids = torch.arange(SEQ, device="cuda").unsqueeze(0).expand(MICRO, -1)
    output = model(data["tokens"], position_ids, None, labels=data["labels"])

    def loss_func(output_tensor):
        loss = output_tensor.float().mean()
        return loss, {"lm loss": loss.detach()}
    return output, loss_func


if "--skip-tp" in ARGS and RANK == 1:
    real_reduce, seen = mappings._reduce, [0]

    def _reduce(input_, group):
        if step_now[0] == SKIP_AT and group.size() > 1:
            seen[0] += 1
            if seen[0] == 3:     # the third tensor-parallel all-reduce of the step
                print(f"PLANTED skip of a tensor-parallel all_reduce on rank {RANK} {time.time()}", flush=True)
                return input_
        return real_reduce(input_, group)
    mappings._reduce = _reduce

data = batches()
step_ms, step_calls, traced = [], [], []
for step in range(STEPS):
    step_now[0] = step
    traced.append(tracer_ab.at_step(step, 5) if AB else None)
    torch.cuda.synchronize()
    t0, c0 = time.perf_counter(), calls[0]
    model.zero_grad_buffer()
    optimizer.zero_grad()
    forward_backward(forward_step_func=forward_step, data_iterator=data, model=model,
                     num_microbatches=MICROBATCHES, seq_length=SEQ, micro_batch_size=MICRO,
                     decoder_seq_length=SEQ, forward_only=False)
    optimizer.step()
    torch.cuda.synchronize()
    step_ms.append((time.perf_counter() - t0) * 1e3)
    step_calls.append(calls[0] - c0)
digest = hashlib.sha256()
for p in model.parameters():
    digest.update(p.detach().float().cpu().contiguous().numpy().tobytes())
os.makedirs(OUT, exist_ok=True)
with open(os.path.join(OUT, f"rank{RANK}.json"), "w") as f:
    json.dump({"sha256": digest.hexdigest(), "step_ms": step_ms, "calls": step_calls, "traced": traced,
               "ab_calls": tracer_ab.calls() if AB else None,
               "coords": {"tp": parallel_state.get_tensor_model_parallel_rank(),
                          "pp": parallel_state.get_pipeline_model_parallel_rank(),
                          "dp": parallel_state.get_data_parallel_rank()}}, f)
print(f"DONE rank {RANK} step median {sorted(step_ms[5:])[len(step_ms[5:]) // 2]:.2f} ms", flush=True)
dist.destroy_process_group()
