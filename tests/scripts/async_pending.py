import time, torch, torch.distributed as dist
import exitlib
dist.init_process_group("gloo"); rank, t = dist.get_rank(), torch.zeros(4)
if rank == 0:
    t0 = time.monotonic(); req = dist.irecv(t, 1)
    print(f"POSTED {time.monotonic() - t0:.3f}", flush=True)
    time.sleep(0.5); req.wait()
else:
    time.sleep(1.5); dist.send(torch.ones(4), 0)
dist.barrier()
print(f"RESULT {t.tolist()}", flush=True)
exitlib.leave(dist)
