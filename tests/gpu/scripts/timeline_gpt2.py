# GPT-2 small DDP, 3 warm-up + 5 steps, then held HOLD_S so the timeline can be fetched.
import os, sys, time, torch, torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel
import timeline_step  # noqa: E402  (traced: train_step)
local = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=512)).cuda()
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
opt, tokens = torch.optim.AdamW(ddp.parameters(), lr=1e-4), torch.randint(0, 50257, (8, 512), device="cuda")
for _ in range(3): timeline_step.train_step(ddp, opt, tokens)
dist.barrier(); os.write(1, f"STEPS_START rank={dist.get_rank()} {time.time()}\n".encode())
for _ in range(5): timeline_step.train_step(ddp, opt, tokens)
os.write(1, f"STEPS_DONE rank={dist.get_rank()} {time.time()}\n".encode()); time.sleep(float(sys.argv[1]))
dist.destroy_process_group()
