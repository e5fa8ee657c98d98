"""DeepSpeed ZeRO stages side by side, one engine each, in one job with a snapshot every step
(tests/recover/test_deepspeed.py; tests/gpu/session.sh x1ds: --cuda at world size 1).
argv: STEPS FAULT(none|hang|kill) AT NAP [--stages 1,2,3] [--cuda] [--bf16] [--time]
FAULT and AT may be lists (hang,kill 8,10): the i-th fault in attempt i (restart count i), at step AT i.
Prints RESTORED / STEP / FINAL lines (as recover_job.py); FINAL: per stage the sha256 of
the engine's final parameters (gathered) and this rank's optimizer partition, counters, LR."""
import hashlib, importlib, json, os, sys, time
started = time.time()
CUDA, BF16, TIME = "--cuda" in sys.argv, "--bf16" in sys.argv, "--time" in sys.argv
if not CUDA:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
if not CUDA:   # no JIT build of the CPU shm all-reduce: inference only (tests/frameworks/scripts/deepspeed_zero3.py)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
import torch, torch.distributed as dist  # noqa: E402
from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state  # noqa: E402
from diag.recover import Checkpointer, RNGState  # noqa: E402

steps, nap = int(sys.argv[1]), float(sys.argv[4])
faults, ats = sys.argv[2].split(","), [int(a) for a in sys.argv[3].split(",")]
stages = [int(s) for s in sys.argv[sys.argv.index("--stages") + 1].split(",")] if "--stages" in sys.argv else [1, 2, 3]
restart, say = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), lambda t: os.write(1, f"{t}\n".encode())
fault, at = (faults[restart], ats[restart]) if restart < len(faults) else ("none", -1)
if CUDA:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
deepspeed.init_distributed(dist_backend="nccl" if CUDA else "gloo")
rank, dev = dist.get_rank(), torch.device("cuda" if CUDA else "cpu")
engines = {}
for stage in stages:
    torch.manual_seed(0)
    width = 256 if CUDA else 32
    model = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.Tanh(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.Linear(width, 1))
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0, "steps_per_print": 10 ** 9,
              "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_max_lr": 0.01}},
              # some parameters kept whole (persistent), the rest partitioned
              "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 64},
              "bf16": {"enabled": BF16}}
    engines[f"zero{stage}"], *_ = deepspeed.initialize(model=model, config=config,
                                                      optimizer=torch.optim.AdamW(model.parameters(), lr=0.01))
ckpt = Checkpointer()
ckpt.register(**engines)                     # each rank keeps its own partition of each engine
ckpt.register_local(rng=RNGState())
restoring = time.time()
first = ckpt.restore() or 0
say(f"RESTORED rank={rank} restart={restart} step={first} started={started:.3f} restoring={restoring:.3f} "
    f"restored={time.time():.3f}")
costs = {"on": [], "off": []}
for step in range(first, steps):
    if step == at and rank == min(1, dist.get_world_size() - 1) and fault != "none":
        say(f"FAULT {fault} rank={rank} step={step} t={time.time():.3f}")
        time.sleep(3600) if fault == "hang" else os.kill(os.getpid(), 9)
    t0 = time.perf_counter()
    for engine in engines.values():
        g = torch.Generator().manual_seed(1000 * step + rank)     # the data position is the step
        x = torch.randn(4, 16, generator=g)
        x, y = x.to(dev, engine.module[0].weight.dtype), x.sum(1, keepdim=True).sin().to(dev, engine.module[0].weight.dtype)
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
    snap = not TIME or step % 2 == 0     # --time: a snapshot every other step, paired with the step between
    if snap:
        ckpt.save(step + 1)
    if CUDA and TIME:
        torch.cuda.synchronize()
    costs["on" if snap else "off"].append(time.perf_counter() - t0)
    say(f"STEP rank={rank} restart={restart} step={step} t={time.time():.3f}")
    time.sleep(nap)
ckpt.close()
shas = {}
for name, engine in engines.items():
    # full parameters and Adam moments (gathered: collectives), the steps, counters and LR; not the
    # raw partitions, whose alignment padding is uninitialised memory on the last rank
    digest = hashlib.sha256()
    for p in engine.module.parameters():
        for t in (safe_get_full_fp32_param(p), safe_get_full_optimizer_state(p, "exp_avg"),
                  safe_get_full_optimizer_state(p, "exp_avg_sq")):
            digest.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    with deepspeed.zero.GatheredParameters(list(engine.module.parameters()), enabled=name == "zero3"):
        for p in engine.module.parameters():
            digest.update(p.detach().float().cpu().numpy().tobytes())
    steps_now = sorted({float(v["step"]) for v in engine.optimizer.optimizer.state.values()})
    digest.update(repr((steps_now, [getattr(engine, k) for k in ("global_steps", "global_samples", "skipped_steps")],
                        engine.lr_scheduler.state_dict())).encode())
    shas[name] = digest.hexdigest()
say(f"FINAL rank={rank} restart={restart} " + " ".join(f"{k}={v}" for k, v in shas.items()))
if TIME:
    st = ckpt.stats
    say("COST " + json.dumps({"step_with_save_s": costs["on"], "step_without_s": costs["off"],
                              "save_call_s": st["save_call_s"], "saved": st["saved"], "committed": st["committed"],
                              "skipped_slot": st["skipped_slot"], "skipped_busy": st["skipped_busy"],
                              "prehook_wait_s": st["prehook_wait_s"], "prehook_waits": st["prehook_waits"]}))
dist.destroy_process_group()
