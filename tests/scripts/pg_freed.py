import gc, weakref, torch, torch.distributed as dist
import exitlib
dist.init_process_group("gloo")  # every traced path, then: are the groups freed?
rank, t = dist.get_rank(), torch.ones(4)
sub = dist.new_group([0, 1])
dist.all_reduce(t); dist.all_reduce(t, group=sub); dist.all_reduce(t, async_op=True).wait()
req = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0); req.wait()
refs = [weakref.ref(dist.group.WORLD), weakref.ref(sub)]
del sub, req
dist.destroy_process_group(); gc.collect()
print("ALIVE", sum(r() is not None for r in refs), flush=True)
exitlib.leave()
