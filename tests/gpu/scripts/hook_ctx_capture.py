"""Per rank: a graph capture while an NCCL all-reduce is in flight, and which GPUs hold this pid."""
import json, os, sys
import pynvml, torch, torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
big = torch.ones(1 << 28, device="cuda")
for _ in range(3):
    dist.all_reduce(big)
dist.all_reduce(big)  # still running on NCCL's stream while we capture below
a = torch.ones(1024, device="cuda")
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):  # global capture mode, torch's default
    b = a * 2
graph.replay()
torch.cuda.synchronize()
pynvml.nvmlInit()
gpus = [i for i in range(pynvml.nvmlDeviceGetCount())
        if os.getpid() in [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i))]]
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump({"capture_ok": bool((b == 2).all()), "gpus": gpus, "pid": os.getpid()}, f)
dist.destroy_process_group()
