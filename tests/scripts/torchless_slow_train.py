"""slow_train.py without torch (torchless.py): steps of an all_reduce for
RUN_S seconds. In the phases SLOW_PHASES ("10-30,50-70": seconds since start)
rank SLOW_RANK sleeps SLOW_MS more before its all_reduce (a straggler). At
PAUSE_AT s every rank pauses PAUSE_S (a checkpoint); rank 0 then writes
SOLO_S more while the others wait."""
import os, time
import torchless as dist
env, t0, step = os.environ.get, time.monotonic(), 0
phases = [tuple(map(float, p.split("-"))) for p in env("SLOW_PHASES", "").split(",") if p]
slow_rank, sleep_s, run_s = int(env("SLOW_RANK", "-1")), float(env("SLOW_MS", "0")) / 1e3, float(env("RUN_S", "30"))
pause_at, pause_s, solo_s = float(env("PAUSE_AT", "-1")), float(env("PAUSE_S", "0")), float(env("SOLO_S", "0"))
while True:
    t = time.monotonic() - t0
    slow = dist.rank == slow_rank and any(lo <= t < hi for lo, hi in phases)
    time.sleep(0.01 + (sleep_s if slow else 0.0))
    if 0 <= pause_at <= t: time.sleep(pause_s + (solo_s if dist.rank == 0 else 0.0)); pause_at = -1
    dist.all_reduce(1.0); step += 1
    if step % 25 == 0 and dist.all_reduce(float(t > run_s)) > 0: break   # a sum of 0s and 1s: their MAX
dist.barrier()
dist.leave()
