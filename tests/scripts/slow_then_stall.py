"""argv: FLAG SLOW_RANK SLOW_MS. Rank SLOW_RANK sleeps SLOW_MS before each
all_reduce (a straggler) until the file FLAG exists, then stalls (a hang)."""
import os, sys, time, torch, torch.distributed as dist
flag, slow_rank, slow_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) / 1e3
dist.init_process_group("gloo"); rank, t = dist.get_rank(), torch.ones(1024, requires_grad=True)
opt = torch.optim.SGD([t], lr=0.0)   # its steps give the step-time series
os.write(1, f"STARTED rank={rank}\n".encode())
while True:   # until the test ends the job
    if rank == slow_rank:
        time.sleep(600 if os.path.exists(flag) else slow_s)
    time.sleep(0.01); dist.all_reduce(t.data); opt.step()
