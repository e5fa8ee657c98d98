import os, sys, time   # stall.py without torch (torchless.py): rank 2 stalls at step 3 of the first attempt
import torchless as dist
def wait_for_data(seconds):  # the stalled function the stacks must show; ends early once STALL_RELEASE (a file) exists
    end, release = time.monotonic() + seconds, os.environ.get("STALL_RELEASE")
    while time.monotonic() < end and not (release and os.path.exists(release)): time.sleep(0.05)
stall_s, steps, t = float(sys.argv[1]), int(sys.argv[2]), 1.0
nap = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05   # seconds after each step
for step in range(steps):
    if dist.rank == 2 and step == 3 and stall_s > 0 and dist.restart == "0":
        dist.say(f"STALL {time.time()}"); wait_for_data(stall_s)
    t = dist.all_reduce(t) / dist.world_size; time.sleep(nap)
dist.say(f"DONE rank={dist.rank} restart={dist.restart} value={t:.0f}")
dist.leave()
