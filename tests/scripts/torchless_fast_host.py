import sys, time   # fast_host.py without torch (torchless.py)
import ticklib
import torchless as dist
run_s, stall_s, calls = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])  # tick calls between all-reduces
seq, end = 0, time.monotonic() + run_s
while True:  # ticks as fast as Python calls them, then an all-reduce that also says when both are done
    for _ in range(calls): ticklib.tick()
    done = dist.all_reduce(float(time.monotonic() > end)) > 0; seq += 1   # a sum of 0s and 1s: their MAX
    if done: break
if dist.rank == 1: dist.say(f"STALL {time.time()} after seq {seq}"); time.sleep(stall_s)
dist.all_reduce(1.0)
dist.say(f"DONE rank={dist.rank} seq={seq + 1}")
dist.leave()
