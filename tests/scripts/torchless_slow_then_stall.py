"""slow_then_stall.py without torch (torchless.py). argv: FLAG SLOW_RANK SLOW_MS.
Rank SLOW_RANK sleeps SLOW_MS before each all_reduce (a straggler) until the
file FLAG exists, then stalls (a hang); each step ends with an optimizer step."""
import os, sys, time
import torchless as dist
flag, slow_rank, slow_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) / 1e3
dist.say(f"STARTED rank={dist.rank}")
while True:   # until the test ends the job
    if dist.rank == slow_rank:
        time.sleep(600 if os.path.exists(flag) else slow_s)
    time.sleep(0.01); dist.all_reduce(1.0)
    t0 = time.monotonic_ns(); dist.step(time.monotonic_ns() - t0)
