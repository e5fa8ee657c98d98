import os, sys, time, torch, torch.distributed as dist
e = os.environ
store = dist.PrefixStore("attempt" + e["TORCHELASTIC_RESTART_COUNT"], dist.TCPStore(e["MASTER_ADDR"], int(e["MASTER_PORT"]), is_master=False))
dist.init_process_group("gloo", store=store, rank=int(e["RANK"]), world_size=int(e["WORLD_SIZE"]))
tp, dp = dist.new_group([0, 1], group_desc="tp"), dist.new_group([0, 1], group_desc="dp")
rank, t = dist.get_rank(), torch.ones(8)
for step in range(3):
    dist.all_reduce(t, group=tp); dist.all_reduce(t, group=dp); dist.all_reduce(t)
if rank == 1:
    os.write(1, b"STALL\n"); time.sleep(120)   # rank 1 never makes dp's 4th all_reduce
dist.all_reduce(t, group=dp)
