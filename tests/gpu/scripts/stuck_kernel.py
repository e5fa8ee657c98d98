"""Two gloo ranks on cuda:0 (issue 41 item 5). Each step launches a short spin
kernel first (a probe period after the last step, so the hook probes it), reads
a value back with .item() and all-reduces it. At step STUCK_STEP (20) rank
STUCK_RANK (1) launches the spin kernel with a count that never ends; its
.item() then spins in the driver, and rank 0 waits in the next all_reduce."""
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo"); rank, env = dist.get_rank(), os.environ.get
x = torch.ones(1, device="cuda:0"); y = x * 1
for step in range(1, 10**6):
    time.sleep(0.02)                                  # the spin kernel is the step's first launch
    stuck = rank == int(env("STUCK_RANK", "1")) and step == int(env("STUCK_STEP", "20"))
    if stuck: print(f"STUCK rank {rank} step {step} {time.time():.3f}", flush=True)
    torch.cuda._sleep(1 << 62 if stuck else 20_000)   # ~10 us; forever when stuck
    v = y.item(); y = x * (step + 1)                  # waits for the device: nothing launched before it
    dist.all_reduce(torch.tensor([v]))
