"""One rank: train a small bf16 MLP, run big matmuls, capture a CUDA graph,
then write what this rank's hook recorded to OUT_DIR/rank<R>.json."""
import json, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
import torch
from tests.gpu.hook_regions import own_region, peek, summarize

torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 4096)).cuda().bfloat16()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(20):
    opt.zero_grad(); model(x).float().square().mean().backward(); opt.step()
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(10):
    c = a @ a
g = torch.cuda.CUDAGraph(); s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3): c = a @ a  # warm up outside capture
    with torch.cuda.graph(g): c = a @ a
torch.cuda.synchronize(); time.sleep(1.0)  # the drainer polls every ms
path = own_region()
result = {"region": path, "loss_ok": bool(torch.isfinite(c).all())}
if path:
    header, records = peek(path)
    result.update(summarize(records), disabled=bool(header.flags & 1), rank=header.rank)
with open(os.path.join(sys.argv[1], f"rank{os.environ.get('RANK', 0)}.json"), "w") as f:
    json.dump(result, f, indent=1)
