import os, sys, time, torch, torch.distributed as dist
e = os.environ
store = dist.PrefixStore("attempt" + e["TORCHELASTIC_RESTART_COUNT"], dist.TCPStore(e["MASTER_ADDR"], int(e["MASTER_PORT"]), is_master=False))
dist.init_process_group("gloo", store=store, rank=int(e["RANK"]), world_size=int(e["WORLD_SIZE"]))
rank, t = dist.get_rank(), torch.ones(8)
if rank == 1:
    time.sleep(120)   # rank 1 never posts its recv
elif sys.argv[1] == "send":
    dist.send(t, 1)
else:
    [w.wait() for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, t, 1)])]
