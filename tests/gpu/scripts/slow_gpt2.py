"""GPT-2 small DDP (bf16 autocast, AdamW, batch 8 x 1024) for RUN_S seconds,
for the SLOW verdicts on real GPUs (tests/gpu/session.sh x2slow).

  SLOW_MODE=gpu   rank SLOW_RANK's GPU is slowed for real: at each step a side
                  stream runs a Triton kernel that fills every SM's thread
                  slots with arithmetic for about DUTY of the step, so the
                  GEMMs beside it get fewer SMs (as with lower clocks). It is
                  not a GEMM: the hook sees only a launch. No GPU setting changes.
  SLOW_MODE=host  rank SLOW_RANK sleeps SLEEP_SHARE of each step on the host
                  before its forward (its GEMMs stay healthy).
  PAUSE_AT=s      every rank writes a checkpoint then (rank 0 writes the model
                  with torch.save and the others wait in a barrier).
The slowdown starts after WARM_S seconds (it says so on stdout)."""
import os
import time

import torch
import torch.distributed as dist

from gpt2_ddp import Gpt2Ddp

env = os.environ.get
job = Gpt2Ddp(batch=8, positions=1024)
local, rank = job.local, job.rank
mode, slow_rank = env("SLOW_MODE", ""), int(env("SLOW_RANK", "-1"))
run_s, warm_s, pause_at = float(env("RUN_S", "60")), float(env("WARM_S", "20")), float(env("PAUSE_AT", "-1"))
side = torch.cuda.Stream()


def make_burn():
    """A kernel of ~2048 busy threads per SM; returns burn(n_iter)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _burn(out_ptr, n_iter):
        pid = tl.program_id(0)
        offs = tl.arange(0, 256)
        acc = offs.to(tl.float32) + pid
        for _ in range(n_iter):
            acc = acc * 0.999999 + 0.000001
        tl.store(out_ptr + pid * 256 + offs, acc)

    grid = torch.cuda.get_device_properties(local).multi_processor_count * 8
    out = torch.empty(grid * 256, device="cuda")
    return lambda n: _burn[(grid,)](out, n, num_warps=8)


def burn_ms(burn, n) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    burn(n); a.record(); burn(n); b.record(); b.synchronize()
    return a.elapsed_time(b)


t0, steps, slow, load, sleep_s = time.monotonic(), 0, False, 0, 0.0
done = torch.zeros(1, device="cuda")
while done.item() == 0:
    t = time.monotonic() - t0
    if not slow and t >= warm_s and rank == slow_rank and mode:
        step_s = t / max(steps, 1)
        if mode == "gpu":
            burn = make_burn()
            want_ms = float(env("DUTY", "0.3")) * step_s * 1e3
            load = max(1, int(20000 * want_ms / burn_ms(burn, 20000)))
            print(f"rank {rank}: a {burn_ms(burn, load):.1f} ms side-stream kernel each "
                  f"{1e3 * step_s:.0f} ms step from now", flush=True)
        else:
            share = float(env("SLEEP_SHARE", "0.2"))
            sleep_s = share / (1 - share) * step_s
            print(f"rank {rank}: sleeping {1e3 * sleep_s:.0f} ms a step from now", flush=True)
        slow = True
    if load:
        side.wait_stream(torch.cuda.current_stream())   # beside this step, not queued behind it
        with torch.cuda.stream(side):
            burn(load)
    time.sleep(sleep_s)
    job.step()
    steps += 1
    if 0 <= pause_at <= t:
        pause_at = -1
        if rank == 0:
            torch.save(job.model.state_dict(), f"/tmp/slow_gpt2_ckpt_{os.getpid()}.pt")
            time.sleep(float(env("PAUSE_S", "10")))
        dist.barrier()
    if steps % 10 == 0:
        done.fill_(float(t > run_s))
        dist.all_reduce(done)
torch.cuda.synchronize()
print(f"rank {rank} done after {steps} steps", flush=True)
dist.destroy_process_group()
