import os, sys, time, torch, torch.distributed as dist
import exitlib, ticklib
run_s, stall_s, calls = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])  # tick calls between all-reduces
dist.init_process_group("gloo"); rank, seq, end = dist.get_rank(), 0, time.monotonic() + run_s
while True:  # ticks as fast as Python calls them, then an all-reduce that also says when both are done
    for _ in range(calls): ticklib.tick()
    done = torch.tensor([float(time.monotonic() > end)]); dist.all_reduce(done, op=dist.ReduceOp.MAX); seq += 1
    if done.item(): break
if rank == 1: os.write(1, f"STALL {time.time()} after seq {seq}\n".encode()); time.sleep(stall_s)
dist.all_reduce(done)
os.write(1, f"DONE rank={rank} seq={seq + 1}\n".encode())
exitlib.leave(dist)
