import os, sys, time
import exitlib
import ckptlib
torch, dist = ckptlib.start_job(); rank, t = dist.get_rank(), torch.ones(4)
mode, seconds = sys.argv[1], float(sys.argv[2])  # "checkpoint": a long save by every rank; "block": all stuck
for step in range(6):
    dist.all_reduce(t); time.sleep(0.05)
    if step == 2 and mode == "checkpoint": ckptlib.save_checkpoint(seconds)
if mode == "block":
    os.write(1, f"BLOCKED {time.time()}\n".encode()); ckptlib.wait_for_lock(seconds)
dist.barrier()
os.write(1, f"DONE rank={rank}\n".encode())
exitlib.leave(dist)
