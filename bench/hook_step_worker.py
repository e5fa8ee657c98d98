"""One DDP rank of bench/hook_step_overhead.py: GPT-2 (random weights from a
transformers config) trained on random tokens, in turns.

    hook_step_worker.py VARIANT BATON_PORT ROUNDS STEPS WARMUP BATCH SEQ GEN PAIRS

The job stays alive for one generation (GEN) of rounds; it takes its turns
through the driver's TCPStore (the baton): for round r (-1 is the warm-up) it
waits for key GEN/go/VARIANT/r, runs its steps (cuda synchronize around each,
so a step's time is its device time too; one untimed step first), and answers
GEN/done/VARIANT/r/RANK with the step times. Only one job runs steps at a time,
so the variants share the GPUs fairly.

With PAIRS > 0 (the hooked job), after its rounds it waits for
GEN/go/VARIANT/pairs and runs PAIRS pairs of steps, one with the hook recording
and one bypassed (xpu_timer_hook_bypass), in ABBA order, and answers
GEN/pairs/VARIANT/RANK. Every rank switches at the same step, so the hook's
collective sequence numbers stay in step across ranks."""
import ctypes
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel

variant, port = sys.argv[1], int(sys.argv[2])
rounds, steps, warmup, batch, seq, gen, pairs = (int(a) for a in sys.argv[3:10])
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


def step() -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = ddp(tokens, labels=tokens).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def run_pairs() -> dict:
    bypass = ctypes.CDLL(None).xpu_timer_hook_bypass  # the preloaded hook's control
    bypass.argtypes = [ctypes.c_int]
    times = {"hooked": [], "bypassed": []}
    step()  # untimed: the first after the wait
    for p in range(pairs):
        for on in ((0, 1) if p % 2 == 0 else (1, 0)):
            bypass(on)
            times["bypassed" if on else "hooked"].append(step())
    bypass(0)
    return times


baton.set(f"{gen}/ready/{variant}/{rank}", "1")
for rnd in range(-1, rounds):
    baton.wait([f"{gen}/go/{variant}/{rnd}"])
    # One untimed step first: the turn's first step pays for the switch.
    times = [step() for _ in range(warmup if rnd < 0 else steps + 1)][1:]
    baton.set(f"{gen}/done/{variant}/{rnd}/{rank}", json.dumps(times))
if pairs:
    baton.wait([f"{gen}/go/{variant}/pairs"])
    baton.set(f"{gen}/pairs/{variant}/{rank}", json.dumps(run_pairs()))
dist.destroy_process_group()
