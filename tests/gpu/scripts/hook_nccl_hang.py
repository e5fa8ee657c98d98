"""A real NCCL hang: rank 1 skips the 6th all-reduce, so rank 0's kernel never ends."""
import os, time, torch, torch.distributed as dist

rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
x = torch.ones(1024, device="cuda")
for step in range(8):
    if rank == 1 and step == 5:
        print(f"SKIP {time.time():.3f}", flush=True)
        time.sleep(600)  # never joins this all-reduce
    dist.all_reduce(x)
    torch.cuda.synchronize()
