"""torchtitan's debug Llama 3 (its "debugmodel" flavor, flex attention) on
GPUs: torchtitan's own model, ParallelDims and parallelize_llama (tensor
parallelism with sequence parallelism, FSDP2, torch.compile of each block),
random tokens, plain AdamW, its clip_grad_norm_ and loss: the step its
Trainer runs, without the tokenizer and dataset the Trainer would download.

    torchrun|xpu_timer_launch --nproc-per-node 4 torchtitan_llama.py OUT_DIR [--steps N]
        [--stall-tp | --stall-data | --skip-tp] [--cpu] [--no-compile]

4 ranks: TP=2 x FSDP=2 (rank = fsdp * 2 + tp); 2 ranks: TP=2 alone.
Each rank writes OUT_DIR/rank<R>.json: the sha256 of its final parameters
(its local shards), each step's time (ms, synchronised) and the collectives
its process groups issued each step (their sequence numbers: every path,
Python, DTensor's C++ functional collectives and the compiled blocks).
--stall-tp: rank 1 (tp 1) stops in its forward at STALL_AT.
--stall-data: the last rank (tp 1, fsdp 1 on 4 ranks) stops in its data iterator at STALL_AT.
--skip-tp: rank 1 skips the tensor-parallel reduce-scatter of the token
embedding's output (sequence parallelism) at SKIP_AT, as a rank-conditional
branch would, and runs on.
--cpu: gloo on CPU; causal SDPA attention (flex attention has no CPU backward).
On a torch whose create_block_mask lacks separate_full_blocks (2.11) the
blocks take the causal SDPA attention too, said in the DONE line.
TITAN_SEQ, TITAN_BATCH: sequence length and local batch (default 2048 x 8, CPU 128 x 2);
TITAN_SPMD_BACKEND: torchtitan's spmd_backend (default partial_dtensor;
docs/frameworks.md says why not 0.3.0's spmd_types). Each planted fault
prints PLANTED <what> first.
"""
import dataclasses
import hashlib
import json
import os
import sys
import time
import types

import torch
import torch.distributed as dist

OUT = sys.argv[1]
ARGS = sys.argv[2:]
STEPS = int(ARGS[ARGS.index("--steps") + 1]) if "--steps" in ARGS else 30
CPU = "--cpu" in ARGS
COMPILE = "--no-compile" not in ARGS
STALL_AT, SKIP_AT = 8, 8
SEQ = int(os.environ.get("TITAN_SEQ", "128" if CPU else "2048"))
BATCH = int(os.environ.get("TITAN_BATCH", "2" if CPU else "8"))
RANK, WORLD, LOCAL = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
TP = 2

try:
    import triton  # noqa: F401
except ImportError:
    # torchtitan 0.3.0's models.common imports its expert-parallel MoE kernels,
    # written in Triton, at import; the dense Llama never runs them, and torch's
    # CPU wheel ships no Triton. Any call says so instead of importing it.
    kernels = types.ModuleType("torchtitan.distributed.minimal_async_ep.kernels")

    def _needs_triton(name):
        if name.startswith("__"):
            raise AttributeError(name)

        def missing(*args, **kwargs):
            raise RuntimeError(f"torchtitan's {name} needs Triton")
        return missing
    kernels.__getattr__ = _needs_triton
    sys.modules[kernels.__name__] = kernels

import torch.distributed.fsdp as _fsdp  # noqa: E402

if not hasattr(_fsdp, "DataParallelMeshDims"):
    # torch 2.11 (the GPU image's) has no DataParallelMeshDims, which
    # torchtitan 0.3.0 imports at the top of distributed/full_dtensor.py for its
    # full_dtensor and spmd_types backends; the partial_dtensor backend run
    # here never builds one (its FSDP call takes no dp_mesh_dims).
    @dataclasses.dataclass
    class DataParallelMeshDims:
        shard: object = None
        replicate: object = None
    _fsdp.DataParallelMeshDims = DataParallelMeshDims

from torchtitan.components.loss import CrossEntropyLoss  # noqa: E402
from torchtitan.config import CompileConfig, DebugConfig, ParallelismConfig, TrainingConfig  # noqa: E402
from torchtitan.distributed import ParallelDims  # noqa: E402
from torchtitan.distributed import utils as dist_utils  # noqa: E402
from torchtitan.models.common.attention import ScaledDotProductAttention  # noqa: E402


def _flex_usable() -> bool:
    """torchtitan 0.3.0 builds its flex block masks with create_block_mask's
    separate_full_blocks, which torch 2.11 (the GPU image) lacks: it failed
    at the first step there (docs/gpu-runs/h100x4/s16-fw32/call3/)."""
    import inspect

    from torch.nn.attention.flex_attention import create_block_mask
    return "separate_full_blocks" in inspect.signature(create_block_mask).parameters


# Causal SDPA, torchtitan's own block, where flex attention cannot run: on CPU
# (no backward there) and on a torch older than torchtitan's flex code needs.
SDPA = CPU or not _flex_usable()
from torchtitan.models.common.config_utils import decoder_vocab_size  # noqa: E402
from torchtitan.models.llama3 import model_registry  # noqa: E402
from torchtitan.models.llama3.sharding import set_llama3_sharding_config  # noqa: E402

if CPU:
    # torchtitan takes the available accelerator, else "cuda", as its device
    # (tools/utils.py): on CPU its meshes would ask for CUDA. Where it bound the
    # name at import, it is CPU's.
    import torchtitan.distributed.parallel_dims as _parallel_dims
    import torchtitan.tools.utils as _tools_utils
    for module in (_tools_utils, _parallel_dims, dist_utils):
        module.device_type = "cpu"
        if hasattr(module, "device_module"):
            module.device_module = torch.cpu

DEVICE = torch.device("cpu") if CPU else torch.device("cuda", LOCAL)
if not CPU:
    torch.cuda.set_device(DEVICE)
dist.init_process_group("gloo" if CPU else "nccl")


def collectives() -> int:
    """Collectives issued so far on every process group, as the groups number them
    (the meshes' size-1 dimensions are "fake" groups that issue none)."""
    total = 0
    for pg in dist.distributed_c10d._world.pg_names:
        try:
            total += pg._get_sequence_number_for_group()
        except RuntimeError:
            pass
    return total


def sync() -> None:
    if not CPU:
        torch.cuda.synchronize()


spec = model_registry("debugmodel")
parallelism = ParallelismConfig(tensor_parallel_degree=TP, data_parallel_shard_degree=WORLD // TP,
                                spmd_backend=os.environ.get("TITAN_SPMD_BACKEND", "partial_dtensor"))
training = TrainingConfig(local_batch_size=BATCH, seq_len=SEQ, steps=STEPS,
                          mixed_precision_param="float32" if CPU else "bfloat16")
compile_config = CompileConfig(enable=COMPILE, components=["model", "loss"])
dims = ParallelDims.from_config(parallelism, WORLD)
dims.build_mesh()
dist_utils.set_spmd_backend(parallelism.spmd_backend)
dist_utils.set_determinism(dims, DEVICE, DebugConfig(seed=7), distinct_seed_mesh_dims=["pp"])
config = spec.model
# What update_from_config does for the Trainer's config, without importing the
# Trainer (its module imports tensorboard, torchdata, tokenizers and datasets):
# the RoPE cache cut to the sequence length, the TP/SP sharding plan.
for layer in config.layers:
    layer.attention.rope = dataclasses.replace(layer.attention.rope, max_seq_len=SEQ)
    if SDPA:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
set_llama3_sharding_config(config, enable_sp=parallelism.enable_sequence_parallel)
with torch.device("meta"):
    model = config.build()
model = spec.parallelize_fn(model, parallel_dims=dims, training=training, parallelism=parallelism,
                            compile_config=compile_config, ac_config=None, dump_folder=OUT)
if CPU:
    # torchtitan turns FSDP's gradient division off (factor 1: it divides by the
    # global token count itself), which FSDP issues as PREMUL_SUM(1), and gloo
    # has no PREMUL_SUM: FSDP's own switch to a plain SUM, the same sum.
    from torch.distributed.fsdp import FSDPModule
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)
model.to_empty(device=DEVICE)
with torch.no_grad():
    model.init_weights(buffer_device=None)
model.train()
loss_fn = CrossEntropyLoss(CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(spec)),
                           compile_config=compile_config)
optimizer = torch.optim.AdamW(model.parameters(), lr=8e-4, foreach=True)
batch_mesh = dims.get_mesh("batch") if dims.dp_enabled else None
batch_rank = batch_mesh.get_local_rank() if batch_mesh is not None else 0
tp_rank = dims.get_mesh("tp").get_local_rank()
step_now = [0]


def batches():
    """The same tokens on a tp group's ranks, another slice per batch (dp) rank."""
    while True:
        if "--stall-data" in ARGS and RANK == WORLD - 1 and step_now[0] == STALL_AT:
            print(f"PLANTED stall in rank {RANK}'s data iterator {time.time()}", flush=True)
            time.sleep(3600)
        g = torch.Generator().manual_seed(1000 * step_now[0] + batch_rank)
        tokens = torch.randint(0, config.vocab_size, (BATCH, SEQ + 1), generator=g)
        yield tokens[:, :-1], tokens[:, 1:]


def forward_backward(inputs, labels, global_valid_tokens):
    if "--stall-tp" in ARGS and RANK == 1 and step_now[0] == STALL_AT:
        print(f"PLANTED stall in rank {RANK}'s forward {time.time()}", flush=True)
        time.sleep(3600)
    # One document per sample: the Trainer's per-document positions and flex block mask.
    positions = torch.arange(SEQ, device=DEVICE).unsqueeze(0).expand(BATCH, -1)
    masks = None if SDPA else model.get_attention_masks(positions=positions)
    pred = model(inputs, positions=positions, attention_masks=masks)
    loss, _ = loss_fn(pred, labels, global_valid_tokens)
    del pred
    loss.backward()
    return loss


if "--skip-tp" in ARGS and RANK == 1:
    # The token embedding runs outside the compiled blocks: its sequence-parallel
    # output is a reduce-scatter on the tp group, issued by DTensor (torch 2.13
    # calls funcol.reduce_scatter_single, 2.11 funcol.reduce_scatter_tensor).
    from torch.distributed import _functional_collectives as funcol
    skipped: list = []

    def skipping(real):
        def reduce_scatter(tensor, reduceOp, scatter_dim, group, tag=""):
            if step_now[0] == SKIP_AT and not skipped:
                skipped.append(1)
                print(f"PLANTED skip of a tensor-parallel reduce_scatter on rank {RANK} {time.time()}", flush=True)
                return tensor.chunk(TP, dim=scatter_dim)[tp_rank].contiguous()
            return real(tensor, reduceOp, scatter_dim, group, tag)
        return reduce_scatter
    for name in ("reduce_scatter_single", "reduce_scatter_tensor"):
        if hasattr(funcol, name):
            setattr(funcol, name, skipping(getattr(funcol, name)))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "frameworks", "scripts"))
import tracer_ab  # noqa: E402

AB = "--ab" in ARGS and tracer_ab.install() > 0   # under the launcher: the tracer in and out by blocks
data = batches()
step_ms, step_calls, losses, traced = [], [], [], []
for step in range(STEPS):
    step_now[0] = step
    traced.append(tracer_ab.at_step(step, 5) if AB else None)
    sync()
    t0, c0 = time.perf_counter(), collectives()
    optimizer.zero_grad()
    inputs, labels = next(data)
    inputs, labels = inputs.to(DEVICE), labels.to(DEVICE)
    local_valid_tokens = torch.tensor(labels.numel(), dtype=torch.int64, device=DEVICE)
    global_valid_tokens = (dist_utils.dist_sum_tensor(local_valid_tokens, batch_mesh) if batch_mesh is not None
                           else local_valid_tokens)
    loss = forward_backward(inputs, labels, global_valid_tokens)
    dist_utils.clip_grad_norm_(list(model.parameters()), training.max_norm, foreach=True)
    optimizer.step()
    # The Trainer's log line at log_freq 1: the loss summed over the loss mesh.
    losses.append(dist_utils.dist_sum(loss.detach(), dims.get_optional_mesh("loss")) if dims.dp_enabled
                  else loss.item())
    sync()
    step_ms.append((time.perf_counter() - t0) * 1e3)
    step_calls.append(collectives() - c0)
digest = hashlib.sha256()
for p in model.parameters():
    local = p.to_local() if hasattr(p, "to_local") else p
    digest.update(local.detach().float().cpu().contiguous().numpy().tobytes())
os.makedirs(OUT, exist_ok=True)
with open(os.path.join(OUT, f"rank{RANK}.json"), "w") as f:
    json.dump({"sha256": digest.hexdigest(), "step_ms": step_ms, "calls": step_calls, "losses": losses,
               "traced": traced, "ab_calls": tracer_ab.calls() if AB else None,
               "coords": {"tp": tp_rank, "dp": batch_rank}}, f)
print(f"DONE rank {RANK} step median {sorted(step_ms[5:])[len(step_ms[5:]) // 2]:.2f} ms, "
      f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, attention {'sdpa' if SDPA else 'flex'}", flush=True)
dist.destroy_process_group()
