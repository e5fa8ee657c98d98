import os, sys, time, torch, torch.distributed as dist
import exitlib
def wait_for_data(seconds):  # the stalled function the stacks must show; ends early once STALL_RELEASE (a file) exists
    end, release = time.monotonic() + seconds, os.environ.get("STALL_RELEASE")
    while time.monotonic() < end and not (release and os.path.exists(release)): time.sleep(0.05)
stall_s, steps, e = float(sys.argv[1]), int(sys.argv[2]), os.environ
# Per-attempt store prefix: torch 2.13's agent store keeps a killed attempt's gloo keys.
store = dist.PrefixStore("attempt" + e["TORCHELASTIC_RESTART_COUNT"], dist.TCPStore(e["MASTER_ADDR"], int(e["MASTER_PORT"]), is_master=False))
dist.init_process_group("gloo", store=store, rank=int(e["RANK"]), world_size=int(e["WORLD_SIZE"]))
rank, t = dist.get_rank(), torch.ones(8)
for step in range(steps):
    if rank == 2 and step == 3 and stall_s > 0 and e["TORCHELASTIC_RESTART_COUNT"] == "0":
        os.write(1, f"STALL {time.time()}\n".encode()); wait_for_data(stall_s)
    dist.all_reduce(t); t /= dist.get_world_size(); time.sleep(0.05)
os.write(1, f"DONE rank={rank} restart={e['TORCHELASTIC_RESTART_COUNT']} value={t[0].item():.0f}\n".encode())  # one write: ranks share stdout
exitlib.leave(dist)
