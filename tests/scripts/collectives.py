import json, torch, torch.distributed as dist
import exitlib
dist.init_process_group("gloo")
rank, t = dist.get_rank(), torch.arange(4.0) + dist.get_rank()
dist.all_reduce(t); dist.broadcast(t, src=0); dist.barrier()
work = dist.all_reduce(t, async_op=True); work.wait()
sub = dist.new_group([0, 1])
out = [torch.zeros(4) for _ in range(2)]; dist.all_gather(out, t, group=sub)
if rank == 0: dist.send(t * 2, 1)
else: dist.recv(t, 0)
req = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0); req.wait()
ops = [dist.P2POp(dist.isend if rank == 0 else dist.irecv, t, 1 - rank)]
for r in dist.batch_isend_irecv(ops): r.wait()
print("RESULT", json.dumps([t.tolist(), out[1].tolist()]), flush=True)
exitlib.leave(dist)
