"""One rank: NCCL all-reduces and all-gathers; writes the collectives its hook recorded."""
import json, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
import torch, torch.distributed as dist
from diag.records import format as fmt
from tests.gpu.hook_regions import own_region, peek

rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
x = torch.ones(1 << 22, device="cuda")
out = torch.empty(x.numel() * dist.get_world_size(), device="cuda")
for _ in range(20): dist.all_reduce(x)
for _ in range(10): dist.all_gather_into_tensor(out, x)
torch.cuda.synchronize(); time.sleep(1.0)
path = own_region()
ends = [dict(name=r.name, kind=r.kind, comm_id=r.comm_id, seq=r.seq, dur_ns=r.duration_ns,
             bytes=r.bytes, flags=r.flags, comm_rank=r.comm_rank, comm_size=r.comm_size)
        for r in (peek(path)[1] if path else []) if r.event == fmt.EVENT_END and r.kind in (3, 4)]
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump({"region": path, "ends": ends}, f)
dist.destroy_process_group()
