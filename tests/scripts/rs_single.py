import sys, time, torch, torch.distributed as dist
import exitlib
dist.init_process_group("gloo"); rank, world = dist.get_rank(), dist.get_world_size()
out, inp, gathered = torch.zeros(4), torch.arange(8.0) + rank, torch.zeros(8)
for _ in range(3):                      # FSDP2's calls: sync, and async waited later
    dist.reduce_scatter_single(out, inp)
    work = dist.reduce_scatter_single(out, inp, async_op=True)
    dist.all_gather_single(gathered, out[:4])
    work.wait()
dist.all_reduce(out)
print(f"RESULT {out.tolist()} {gathered.tolist()}", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)   # idle: nothing may stay in flight
exitlib.leave(dist)
