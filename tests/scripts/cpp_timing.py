import time, torch, torch.distributed as dist
import exitlib
dist.init_process_group("gloo"); pg = dist.group.WORLD
t = torch.ones(1 << 20)
sync = []
for _ in range(20):                     # the truth: blocking calls, timed here
    t0 = time.monotonic_ns(); pg.allreduce([t]).wait(); sync.append(time.monotonic_ns() - t0)
for _ in range(20):                     # the same op, issued as DDP's reducer does, waited late
    work = pg.allreduce([t]); time.sleep(0.05); work.wait()
dist.barrier()
print(f"SYNC_NS {sorted(sync)[len(sync) // 2]}", flush=True)
exitlib.leave(dist)
