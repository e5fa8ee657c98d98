"""Two ranks on cuda:0 that never call torch.cuda.set_device (issue 34 item 6):
GEMMs on tensors made with device="cuda:0", a gloo all_reduce of a CPU flag
per step, so no collective ever touches a CUDA tensor and the tracer names no
device; only the hook's launches can. Planted faults, by environment:
- SLOW_RANK: that rank's GEMMs are fp32 without TF32 (the same shapes, a
  fraction of bf16's TFLOP/s): a slow GPU, or a straggler, named by SLOW.
- HANG_RANK (with HANG_AFTER_S): after that many seconds that rank launches a
  kernel that spins for hours (torch.cuda._sleep) and a GEMM behind it, then
  waits for the GPU: a GPU-kernel hang, named by HANG; the other rank waits in
  the next all_reduce."""
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo"); rank, env = dist.get_rank(), os.environ.get
slow, hang = str(rank) == env("SLOW_RANK", "-1"), str(rank) == env("HANG_RANK", "-1")
torch.backends.cuda.matmul.allow_tf32 = False
dtype = torch.float32 if slow else torch.bfloat16
a, flag, t0, steps = torch.randn(4096, 4096, device="cuda:0", dtype=dtype), torch.zeros(1), time.monotonic(), 0
print(f"rank {rank}: current device {torch.cuda.current_device()}, {dtype}", flush=True)
while flag.item() == 0:
    for _ in range(10): a @ a
    if hang and time.monotonic() - t0 > float(env("HANG_AFTER_S", "20")):
        print(f"rank {rank}: spinning kernel launched", flush=True)
        torch.cuda._sleep(1 << 50); a @ a       # never ends: the GEMM behind it stays in flight
    torch.cuda.synchronize(); steps += 1
    flag = torch.tensor([float(time.monotonic() - t0 > float(env("RUN_S", "40")))]); dist.all_reduce(flag, op=dist.ReduceOp.MAX)
print(f"rank {rank}: {steps} steps of 10 GEMMs in {time.monotonic() - t0:.1f} s", flush=True)
dist.destroy_process_group()
