"""A deterministic 2-layer job with snapshots: argv OUT MODE(ddp|fsdp|single) STEPS [DIE_AT [wait|nowait]].
Every rank SIGKILLs itself after save(DIE_AT): wait, once it is committed;
nowait, with it still in flight (every older one committed)."""
import os, signal, sys
import torch
import torch.distributed as dist
from diag.recover import Checkpointer, RNGState

out, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
die_at, how = (int(sys.argv[4]), sys.argv[5]) if len(sys.argv) > 5 else (None, "")
if mode != "single":
    dist.init_process_group("gloo")
rank, world = (dist.get_rank(), dist.get_world_size()) if mode != "single" else (0, 1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1))
if mode == "ddp":
    model = torch.nn.parallel.DistributedDataParallel(model)
elif mode == "fsdp":
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world,))
    fully_shard(model[0], mesh=mesh), fully_shard(model[3], mesh=mesh), fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.9)
progress = {"step": 0}
ck = Checkpointer()
ck.register(model=model, optim=opt, sched=sched)
ck.register_local(rng=RNGState(), progress=progress)
start = ck.restore() or 0
assert start == progress["step"], (start, progress)
with open(os.path.join(out, f"rank{rank}.restored"), "w") as f:
    f.write(str(start))
for step in range(start, steps):
    g = torch.Generator().manual_seed(1000 * step + rank)     # the data position is the step
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 1, generator=g)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step(), opt.zero_grad(), sched.step()
    progress["step"] = step + 1
    if step + 1 == die_at and how == "nowait":
        # Only the last snapshot may be in flight when the rank dies: on a
        # loaded machine the previous one's commit (background thread) can
        # lag too, and the crash would then test an older step by chance.
        ck.wait()
    ck.save(step + 1)
    if step + 1 == die_at:
        if how == "wait":
            ck.wait()
        os.kill(os.getpid(), signal.SIGKILL)
ck.wait()
torch.save([p.to_local() if hasattr(p, "to_local") else p.detach() for p in model.parameters()],
           os.path.join(out, f"rank{rank}.pt"))
# gloo's threads abort the interpreter's exit now and then (terminate called
# without an active exception) when the group is still alive: end it first
dist.destroy_process_group()
