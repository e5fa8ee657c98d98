# One rank of a 4-process gloo job stalls before an all_reduce; the others wait in it.
import datetime, os, pathlib, sys, time
import torch, torch.distributed as dist
rank, ready = int(os.environ["RANK"]), pathlib.Path(sys.argv[1])
dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
                        timeout=datetime.timedelta(seconds=600))
def stall_before_all_reduce():
    (ready / f"ready-{rank}").touch()
    time.sleep(600)
if rank == 2:
    stall_before_all_reduce()
(ready / f"ready-{rank}").touch()
dist.all_reduce(torch.ones(4))
