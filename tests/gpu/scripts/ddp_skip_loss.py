"""GPT-2-small DDP on NCCL; rank 1 skips the loss all_reduce at step SKIP_STEP."""
import os, time, torch, torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel

local, skip_step = int(os.environ["LOCAL_RANK"]), int(os.environ.get("SKIP_STEP", "7"))
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
rank = dist.get_rank()
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=256)).cuda()
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
tokens = torch.randint(0, 50257, (4, 256), device="cuda")
for step in range(40):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = ddp(tokens, labels=tokens).loss
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    if rank == 1 and step == skip_step:
        print(f"SKIP {time.time():.3f}", flush=True)
        continue  # the logging all_reduce that only rank 1 leaves out
    logged = loss.detach().float()
    dist.all_reduce(logged)
    print(f"step {step} loss {logged.item() / 2:.3f}", flush=True)
