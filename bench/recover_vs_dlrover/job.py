"""The job both tools checkpoint (bench/recover_vs_dlrover.py): a 2-rank gloo DDP MLP, AdamW,
one in-memory checkpoint every step. argv: TOOL(xpu|dlrover) STEPS KILL_AT CKPT_DIR HIDDEN
Rank 1 SIGKILLs itself before step KILL_AT of the first attempt. Lines: RESTORED, STEP, SAVE
(the training thread's time in the save call and, xpu-diag, the optimizer pre-hook's wait), KILL."""
import os, sys, time
import torch, torch.distributed as dist
tool, steps, kill_at, ckdir, hidden = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
say = lambda t: os.write(1, f"{t}\n".encode())
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(64, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
first = 0
if tool == "xpu":
    from diag.recover import Checkpointer
    ck = Checkpointer()
    ck.register(model=model, optim=opt)
    first = ck.restore() or 0
else:
    from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer, StorageType
    ck = DdpCheckpointer(ckdir)
    state = ck.load_checkpoint()
    if state:
        model.load_state_dict(state["model"]), opt.load_state_dict(state["optim"])
        first = state["step"]
say(f"RESTORED rank={rank} restart={restart} step={first} t={time.time():.4f}")
for step in range(first, steps):
    if step == kill_at and restart == 0 and rank == 1:
        say(f"KILL t={time.time():.4f}")
        os.kill(os.getpid(), 9)
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 64, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True).sin())
    opt.zero_grad()
    loss.backward()
    hook0 = ck.stats["prehook_wait_s"] if tool == "xpu" else 0.0
    opt.step()
    hook = ck.stats["prehook_wait_s"] - hook0 if tool == "xpu" else 0.0
    t0 = time.perf_counter()
    if tool == "xpu":
        ck.save(step + 1)
    else:
        ck.save_checkpoint(step + 1, {"model": model.state_dict(), "optim": opt.state_dict(), "step": step + 1},
                           os.path.join(ckdir, f"step-{step + 1}.pt"), storage_type=StorageType.MEMORY)
    say(f"SAVE rank={rank} step={step} call={time.perf_counter() - t0:.6f} prehook={hook:.6f}")
    say(f"STEP rank={rank} restart={restart} step={step} t={time.time():.4f}")
if tool == "xpu":
    ck.close()
dist.destroy_process_group()
