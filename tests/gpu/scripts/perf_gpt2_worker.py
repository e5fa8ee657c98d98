"""One DDP rank for tests/gpu/scripts/perf_gpt2_session.py: two phases, each
held until the driver has scraped /metrics and captured `xpu-diag top`.

  gpt2:   GPT-2 small (random weights from a transformers config), bf16
          autocast, AdamW, batch 16 x 1024 tokens: DDP all-reduces its buckets.
  matmul: 8192^3 bf16 matmuls (the matmul check's shape), then one all-reduce
          of 256 MiB bf16: GEMM TFLOP/s near the H200's ~790, all-reduce busbw
          near netcheck's pairwise figure.

    perf_gpt2_worker.py DIR        (DIR/ready-PHASE from rank 0, DIR/ack-PHASE from the driver)
"""
import os
import sys
import time

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel

out = sys.argv[1]
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
rank = dist.get_rank()
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024)).cuda()
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
tokens = torch.randint(0, 50257, (16, 1024), device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
grad = torch.ones(128 << 20, device="cuda", dtype=torch.bfloat16)   # 256 MiB


def gpt2_step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = ddp(tokens, labels=tokens).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def matmul_step():
    for _ in range(10):
        a @ a
    dist.all_reduce(grad)
    opt.step()   # an (empty-grad) optimizer step marks the step time here too


def phase(name, fn, min_s=15.0, max_s=150.0):
    """Run fn until min_s passed and the driver acknowledged its scrape."""
    t0, said = time.monotonic(), False
    flag = torch.zeros(1, device="cuda")
    while True:
        for _ in range(5):
            fn()
        elapsed = time.monotonic() - t0
        if rank == 0 and elapsed >= min_s and not said:
            open(os.path.join(out, f"ready-{name}"), "w").close()
            said = True
        flag.fill_(1.0 if os.path.exists(os.path.join(out, f"ack-{name}")) or elapsed > max_s else 0.0)
        dist.all_reduce(flag)
        if flag.item() > 0:
            return


phase("gpt2", gpt2_step)
phase("matmul", matmul_step)
torch.cuda.synchronize()
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
