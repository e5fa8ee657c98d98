"""One DDP rank of bench/hook_step_overhead.py: GPT-2 (random weights from a
transformers config) trained on random tokens, in turns.

    hook_step_worker.py VARIANT BATON_PORT ROUNDS STEPS WARMUP BATCH SEQ GEN

The job stays alive for one generation (GEN) of rounds; it takes its turns
through the driver's TCPStore (the baton): for round r (-1 is the warm-up) it
waits for key GEN/go/VARIANT/r, runs its steps (cuda synchronize around each, so a step's time is
its device time too; one untimed step first), and answers GEN/done/VARIANT/r/RANK with the step times.
Only one job runs steps at a time, so the variants share the GPUs fairly."""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel

variant, port = sys.argv[1], int(sys.argv[2])
rounds, steps, warmup, batch, seq, gen = (int(a) for a in sys.argv[3:9])
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
rank = dist.get_rank()
baton = dist.TCPStore("127.0.0.1", port, is_master=False,
                      timeout=datetime.timedelta(seconds=1800))
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=seq)).cuda()
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
tokens = torch.randint(0, 50257, (batch, seq), device="cuda")
baton.set(f"{gen}/ready/{variant}/{rank}", "1")
for rnd in range(-1, rounds):
    baton.wait([f"{gen}/go/{variant}/{rnd}"])
    times = []
    # One untimed step first: the turn's first step pays for the switch.
    for i in range(warmup if rnd < 0 else steps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ddp(tokens, labels=tokens).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i > 0:
            times.append(time.perf_counter() - t0)
    baton.set(f"{gen}/done/{variant}/{rnd}/{rank}", json.dumps(times))
dist.destroy_process_group()
