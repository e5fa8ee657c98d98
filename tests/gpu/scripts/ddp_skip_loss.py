"""GPT-2-small DDP on NCCL; rank 1 skips the loss all_reduce at step SKIP_STEP."""
import os, time, torch.distributed as dist
from gpt2_ddp import Gpt2Ddp

skip_step = int(os.environ.get("SKIP_STEP", "7"))
job = Gpt2Ddp(batch=4, positions=256)
for step in range(40):
    loss = job.step()
    if job.rank == 1 and step == skip_step:
        print(f"SKIP {time.time():.3f}", flush=True)
        continue  # the logging all_reduce that only rank 1 leaves out
    logged = loss.detach().float()
    dist.all_reduce(logged)
    print(f"step {step} loss {logged.item() / 2:.3f}", flush=True)
