"""Deterministic data-parallel job for tests/recover/test_recover_e2e.py (issue 19's orchestration).
argv: steps, fault (none|hang|kill), fault step, seconds per step, rendezvous (static|c10d; the test's, for the record).
The fault is rank 2's (rank 1's in a world of 2)."""
import hashlib, os, sys, time
started = time.time()
import torch, torch.distributed as dist
from diag.recover import Checkpointer
steps, fault, at, nap, rdzv = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
e, say = os.environ, lambda text: os.write(1, f"{text}\n".encode())   # one write: the ranks share stdout
restart = int(e["TORCHELASTIC_RESTART_COUNT"])
# A plain env:// process group, as users write it: after a restart the launcher
# keys it by attempt (diag/recover/attempt_store.py).
dist.init_process_group("gloo")
rank, _ = dist.get_rank(), torch.manual_seed(0)
# Data parallel by hand, one all_reduce per gradient: DDP's first iteration after a
# restart reduces in its initial bucket layout, not the rebuilt one, and gloo's
# ring then sums some elements in another order (docs/recovery.md).
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
ckpt = Checkpointer()
ckpt.register(model=model, optim=opt)
restoring = time.time()
first = ckpt.restore() or 0
say(f"RESTORED rank={rank} restart={restart} step={first} started={started:.3f} restoring={restoring:.3f} "
    f"restored={time.time():.3f}")


def wait_for_data():   # the hung rank's frame in the stacks
    time.sleep(3600)


for step in range(first, steps):
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1000 * step + rank))
    if step == at and restart == 0 and rank == min(2, dist.get_world_size() - 1) and fault != "none":
        say(f"FAULT {fault} rank={rank} step={step} t={time.time():.3f}")
        wait_for_data() if fault == "hang" else os.kill(os.getpid(), 9)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True).sin())
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    opt.step()
    ckpt.save(step + 1)
    say(f"STEP rank={rank} restart={restart} step={step} t={time.time():.3f}")
    time.sleep(nap)
ckpt.close()
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
say(f"FINAL rank={rank} restart={restart} sha={digest}")
dist.destroy_process_group()
