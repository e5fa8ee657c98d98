"""Megatron-Core 0.16.1's DDP and DistributedOptimizer (bf16, through get_megatron_optimizer: a
ChainedOptimizer where it makes one) with a snapshot every step; CUDA only (its grad buffers are
allocated on torch.cuda.current_device()). tests/gpu/test_recover_frameworks_gpu.py, TP=PP=DP=1.
argv: STEPS FAULT(none|kill) AT. Prints RESTORED / STEP / FINAL (sha256 of the model parameters,
the main shards and the inner optimizer's state) as ds_job.py does."""
import hashlib, os, sys, time
started = time.time()
import torch, torch.distributed as dist  # noqa: E402
from megatron.core import parallel_state, tensor_parallel  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig  # noqa: E402
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer  # noqa: E402
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler  # noqa: E402
from megatron.core.transformer import MegatronModule, TransformerConfig  # noqa: E402
from diag.recover import Checkpointer, RNGState  # noqa: E402

steps, fault, at = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
restart, say = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), lambda t: os.write(1, f"{t}\n".encode())
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
parallel_state.initialize_model_parallel(1, 1)
tensor_parallel.model_parallel_cuda_manual_seed(123)     # the tracker's TP stream, which dropout below draws from
rank = dist.get_rank()
cfg = TransformerConfig(num_layers=1, hidden_size=256, num_attention_heads=1, bf16=True, params_dtype=torch.bfloat16,
                        use_cpu_initialization=True)


class MLP(MegatronModule):
    def __init__(self):
        super().__init__(cfg)
        init = torch.nn.init.xavier_normal_
        self.fc1 = tensor_parallel.ColumnParallelLinear(64, 256, config=cfg, init_method=init, bias=True,
                                                        gather_output=False)
        self.fc2 = tensor_parallel.RowParallelLinear(256, 1, config=cfg, init_method=init, bias=True,
                                                     input_is_parallel=True, skip_bias_add=False)

    def forward(self, x):
        h, _ = self.fc1(x)
        with tensor_parallel.get_cuda_rng_tracker().fork():
            h = torch.nn.functional.dropout(torch.tanh(h), 0.1)
        return self.fc2(h)[0]


torch.manual_seed(0)
model = DistributedDataParallel(cfg, DistributedDataParallelConfig(use_distributed_optimizer=True,
                                                                   grad_reduce_in_fp32=True), MLP().cuda())
# min_lr in the config too: get_megatron_optimizer copies it into every param group, where the
# scheduler reads it before its own (None there: "float - NoneType" at the first decay step)
opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-3, min_lr=1e-5, bf16=True,
                                             use_distributed_optimizer=True, clip_grad=1.0), [model])
sched = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=1e-3, min_lr=1e-5, lr_warmup_steps=4, lr_decay_steps=steps,
                                lr_decay_style="cosine", start_wd=0.0, end_wd=0.0, wd_incr_steps=steps,
                                wd_incr_style="constant")
counters = {"iteration": 0, "consumed_train_samples": 0}
ckpt = Checkpointer()
ckpt.register(model=model, optim=opt, sched=sched)      # each rank its shard (replicated=False is inferred)
ckpt.register_local(rng=RNGState(), counters=counters)  # RNGState holds the TP tracker's states too
restoring = time.time()
iteration = ckpt.restore() or 0
assert iteration == counters["iteration"], (iteration, counters)
say(f"RESTORED rank={rank} restart={restart} step={iteration} started={started:.3f} restoring={restoring:.3f} "
    f"restored={time.time():.3f} optimizer={type(opt).__name__}")
while iteration < steps:
    if iteration == at and restart == 0 and fault == "kill":
        say(f"FAULT kill rank={rank} step={iteration} t={time.time():.3f}")
        os.kill(os.getpid(), 9)
    g = torch.Generator().manual_seed(1000 * iteration + rank)
    x = torch.randn(8, 64, generator=g)
    x, y = x.cuda().bfloat16(), x.sum(1, keepdim=True).sin().cuda().bfloat16()
    model.zero_grad_buffer()
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x).float(), y.float()).backward()
    model.finish_grad_sync()
    opt.step()
    sched.step(increment=8)
    iteration += 1
    counters.update(iteration=iteration, consumed_train_samples=counters["consumed_train_samples"] + 8)
    ckpt.save(iteration)
    say(f"STEP rank={rank} restart={restart} step={iteration - 1} t={time.time():.3f}")
ckpt.close()
digest = hashlib.sha256()
for p in model.parameters():
    digest.update(p.detach().float().cpu().numpy().tobytes())
parts = opt.chained_optimizers if hasattr(opt, "chained_optimizers") else [opt]
for part in parts:
    for group in part.optimizer.param_groups:
        for p in group["params"]:
            digest.update(p.detach().float().cpu().numpy().tobytes())
            for key, v in sorted(part.optimizer.state[p].items()):
                digest.update(key.encode() + (v.detach().float().cpu().numpy().tobytes()
                                              if torch.is_tensor(v) else repr(v).encode()))
digest.update(repr((counters, sched.num_steps)).encode())
say(f"FINAL rank={rank} restart={restart} mcore={digest.hexdigest()}")
dist.destroy_process_group()
