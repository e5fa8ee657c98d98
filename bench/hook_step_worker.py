"""One DDP rank of bench/hook_step_overhead.py: GPT-2 (random weights from a
transformers config) trained on random tokens; rank 0 prints the step times."""
import json, os, sys, time
import torch, torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel

steps, warmup, batch, seq = (int(a) for a in sys.argv[1:5])
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=seq)).cuda()
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
tokens = torch.randint(0, 50257, (batch, seq), device="cuda")
times = []
for step in range(warmup + steps):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = ddp(tokens, labels=tokens).loss
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if step >= warmup: times.append(time.perf_counter() - t0)
if dist.get_rank() == 0:
    print("STEP_TIMES " + json.dumps(times), flush=True)
dist.destroy_process_group()
