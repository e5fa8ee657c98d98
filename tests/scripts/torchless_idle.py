import sys, time   # idle.py without torch (torchless.py)
import ckptlib
import torchless as dist
mode, seconds = sys.argv[1], float(sys.argv[2])  # "checkpoint": a long save by every rank; "block": all stuck
for step in range(6):
    dist.all_reduce(1.0); time.sleep(0.05)
    if step == 2 and mode == "checkpoint": ckptlib.save_checkpoint(seconds)
if mode == "block":
    dist.say(f"BLOCKED {time.time()}"); ckptlib.wait_for_lock(seconds)
dist.barrier()
dist.say(f"DONE rank={dist.rank}")
dist.leave()
