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

from gpt2_ddp import Gpt2Ddp

out = sys.argv[1]
job = Gpt2Ddp(batch=16, positions=1024)
rank = job.rank
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
grad = torch.ones(128 << 20, device="cuda", dtype=torch.bfloat16)   # 256 MiB


def matmul_step():
    for _ in range(10):
        a @ a
    dist.all_reduce(grad)
    job.opt.step()   # an (empty-grad) optimizer step marks the step time here too


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


phase("gpt2", job.step)
phase("matmul", matmul_step)
torch.cuda.synchronize()
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
