"""GPT-2 small in DDP under xpu_timer_launch, for the link tests (docs/link.md).

    link_ddp.py OUT_DIR STEPS [PAIRS]

Trains STEPS steps on random tokens (batch 8 x 512, bf16 autocast), printing
"rank R step N" after each, then, with PAIRS > 0, PAIRS pairs of steps with
the NCCL profiler plugin's events on and off (xpu_timer_link_bypass: NCCL's
activation mask to 0), in ABBA order, every rank switching at the same step.
Rank 0 writes OUT_DIR/link_rank0.json: the pairs' step times and what the
plugin's table held (its communicators and entries). Without transformers, a
GPT-2-sized stack of linear layers stands in for the model."""
import ctypes
import json
import os
import sys
import time

import torch
import torch.distributed as dist

out_dir, steps = sys.argv[1], int(sys.argv[2])
pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 0
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
rank = dist.get_rank()
torch.manual_seed(0)
try:
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=512)).cuda()
    kind = "gpt2-small"
except ImportError:
    model = torch.nn.Sequential(*[torch.nn.Linear(768, 768) for _ in range(48)]).cuda()
    kind = "linear-stack"
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
tokens = torch.randint(0, 50257, (8, 512), device="cuda")
x = torch.randn(8 * 512, 768, device="cuda")


def step() -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = ddp(tokens, labels=tokens).loss if kind == "gpt2-small" else ddp(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


for n in range(steps):
    step()
    print(f"rank {rank} step {n}", flush=True)

times = {"on": [], "bypassed": []}
plugin = os.environ.get("NCCL_PROFILER_PLUGIN", "")
if pairs and plugin.endswith("libxpu_nccl_profiler.so"):
    bypass = ctypes.CDLL(plugin).xpu_timer_link_bypass   # the instance NCCL loaded (same path)
    bypass.argtypes = [ctypes.c_int]
    step()
    for p in range(pairs):
        for on in ((0, 1) if p % 2 == 0 else (1, 0)):
            bypass(on)
            times["bypassed" if on else "on"].append(step())
    bypass(0)

if rank == 0:
    from diag.link import table
    found = {}
    for path, (_, pid) in table.find(os.environ.get("XPU_TIMER_SHM_DIR", "")).items():
        if pid == os.getpid():
            tab = table.LinkTable(path)
            found = {"comms": {str(k): list(v) for k, v in tab.comms(destroyed=True).items()},
                     "entries": [e.__dict__ for e in tab.read(destroyed=True)]}
    with open(os.path.join(out_dir, "link_rank0.json"), "w") as f:
        json.dump({"model": kind, "world_size": dist.get_world_size(), "nccl": list(torch.cuda.nccl.version()),
                   "plugin": plugin, "pairs": times, "table": found}, f)
dist.destroy_process_group()
