"""Steps of a small matmul and an all_reduce for RUN_S seconds. In the phases
SLOW_PHASES ("10-30,50-70": seconds since start) rank SLOW_RANK sleeps SLOW_MS
before its all_reduce (a straggler), or, with SLOW_SHARE, that share of its
step (measured before). At PAUSE_AT s every rank pauses PAUSE_S (a
checkpoint); rank 0 then writes SOLO_S more while the others wait."""
import os, time
import exitlib
import torch, torch.distributed as dist
dist.init_process_group("gloo"); rank, env, t0 = dist.get_rank(), os.environ.get, time.monotonic()
phases = [tuple(map(float, p.split("-"))) for p in env("SLOW_PHASES", "").split(",") if p]
pause_at, done, step, said = float(env("PAUSE_AT", "-1")), torch.zeros(1), 0, False
a, grad, share, sleep_s = torch.randn(96, 96), torch.ones(16384), float(env("SLOW_SHARE", "0")), float(env("SLOW_MS", "0")) / 1e3
while done.item() == 0:
    t = time.monotonic() - t0; (a @ a).sum()
    slow = rank == int(env("SLOW_RANK", "-1")) and any(lo <= t < hi for lo, hi in phases)
    if slow and not said:
        sleep_s = sleep_s or share / (1 - share) * t / max(step, 1); said = print(f"rank {rank}: sleeping {1e3 * sleep_s:.1f} ms a step from now", flush=True) or True
    time.sleep(0.01 + (sleep_s if slow else 0.0))
    if 0 <= pause_at <= t: time.sleep(float(env("PAUSE_S", "0")) + (float(env("SOLO_S", "0")) if rank == 0 else 0)); pause_at = -1
    dist.all_reduce(grad); step += 1
    if step % 25 == 0: done = torch.tensor([float(t > float(env("RUN_S", "30")))]); dist.all_reduce(done)
dist.barrier()
exitlib.leave(dist)
