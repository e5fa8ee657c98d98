"""Ranks on one GPU (torch.cuda.set_device(0)): bf16 GEMMs for RUN_S s, a gloo
all_reduce of a CPU flag per step (NCCL refuses two ranks on one GPU). With
MPS_RANK set, that rank asks CUDA MPS for MPS_PERCENT % of the SMs."""
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo"); rank, env = dist.get_rank(), os.environ.get
if str(rank) == env("MPS_RANK", "-1"): os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = env("MPS_PERCENT", "25")
torch.cuda.set_device(0)       # before the first CUDA call: the MPS limit applies to this context
a, flag, t0, steps = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16), torch.zeros(1), time.monotonic(), 0
while flag.item() == 0:
    for _ in range(10): a @ a
    torch.cuda.synchronize(); steps += 1
    flag = torch.tensor([float(time.monotonic() - t0 > float(env("RUN_S", "40")))]); dist.all_reduce(flag, op=dist.ReduceOp.MAX)
print(f"rank {rank}: {steps} steps of 10 GEMMs in {time.monotonic() - t0:.1f} s", flush=True)
dist.destroy_process_group()
