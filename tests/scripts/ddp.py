import sys, time, torch, torch.distributed as dist
import exitlib
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo"); rank = dist.get_rank()
stall_step, where, stall_s, steps = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
def stall():  # rank 1 stops outside any collective, before its forward or its backward
    print("STALL", time.time(), flush=True); time.sleep(stall_s)
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)))  # buffers: broadcast each forward
for step in range(steps):
    if rank == 1 and step == stall_step and where == "forward": stall()
    loss = model(torch.arange(32.0).view(4, 8) * (rank + 1)).square().sum()
    if rank == 1 and step == stall_step and where == "backward": stall()
    loss.backward()
print("RESULT", [round(p.grad.sum().item(), 3) for p in model.parameters()], flush=True)
exitlib.leave(dist)
