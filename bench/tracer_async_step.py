"""The tracer's cost on a Megatron-shaped step, side by side in one run.

Megatron-Core's tensor-parallel layers issue many small async all-reduces on
a sub-group and wait on them later; its pipeline schedule exchanges with the
neighbouring stages through ``batch_isend_irecv``. Issue 32 measured the
launcher at +17-33 % of such a step, all of it the Python tracer. This bench
runs that step shape on real gloo ranks, in alternating blocks untraced and
traced (the tracer patched in and out in step on every rank), while this
process runs the real node agent draining the rings, and prints the step
medians both ways, the tracer's cost per step and per traced op, and the ratio.

    .venv/bin/python bench/tracer_async_step.py [--world 2] [--steps 20] [--rounds 12]
        [--ops 32] [--numel 256] [--backend gloo|nccl]

``--launcher`` runs the same step as a whole job instead, in alternating
runs: plain ``torchrun``, ``xpu_timer_launch`` and ``xpu_timer_launch`` with
the tracer off, the way a user would compare them; it prints each run's
step median (the figure issue 32 quoted).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from diag.common.net import free_port  # noqa: E402


def step(dist, group, tensors, peer_send, peer_recv, send_buf, recv_buf) -> None:
    """One Megatron-shaped step: async TP all-reduces, a pipeline exchange, then the waits."""
    works = [dist.all_reduce(t, group=group, async_op=True) for t in tensors]
    if peer_send is not None:
        ops = [dist.P2POp(dist.isend, send_buf, peer_send), dist.P2POp(dist.irecv, recv_buf, peer_recv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    for w in works:
        w.wait()
    if send_buf.is_cuda:   # the step's time is the device's too
        import torch
        torch.cuda.synchronize()


def setup_job(args):
    import torch
    import torch.distributed as dist
    device = "cpu"
    if args.backend == "nccl":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0)) % torch.cuda.device_count()}"
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.new_group(list(range(world)), group_desc="TENSOR_MODEL_PARALLEL_GROUP")
    tensors = [torch.ones(args.numel, device=device) for _ in range(args.ops)]
    # One rank alone has no neighbour to exchange with: the all-reduces only.
    peer_send, peer_recv = ((rank + 1) % world, (rank - 1) % world) if world > 1 else (None, None)
    return (dist, rank, group, tensors, peer_send, peer_recv, torch.ones(args.numel, device=device),
            torch.zeros(args.numel, device=device))


def worker(args) -> None:
    """Alternating untraced / traced blocks inside one process."""
    from diag.records import format as fmt
    from diag.records.writer import RecordWriter
    from diag.tracer import collectives
    from diag.tracer.core import Tracer

    dist, rank, group, tensors, ps, pr, sb, rb = setup_job(args)
    writer = RecordWriter(os.environ["XPU_TIMER_SHM_DIR"], producer=fmt.PRODUCER_PYTHON,
                          rank=rank, local_rank=rank, world_size=dist.get_world_size(),
                          capacity=int(os.environ["XPU_TIMER_RING_CAPACITY"]))
    tracer = Tracer(writer, rank)
    for _ in range(args.steps):                  # warm-up
        step(dist, group, tensors, ps, pr, sb, rb)
    steps = {"off": [], "on": []}
    for i in range(args.rounds):
        for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
            if mode == "on":
                collectives.patch(tracer)
            dist.barrier(group=group)
            for _ in range(args.steps):
                t0 = time.perf_counter_ns()
                step(dist, group, tensors, ps, pr, sb, rb)
                steps[mode].append(time.perf_counter_ns() - t0)
            collectives.unpatch()
    if rank == 0:
        print(json.dumps({"steps": steps, "dropped": writer.dropped, "enabled": tracer.enabled}), flush=True)
    dist.destroy_process_group()


def job(args) -> None:
    """The step as a plain training script (under torchrun or the launcher)."""
    dist, rank, group, tensors, ps, pr, sb, rb = setup_job(args)
    for _ in range(args.steps):
        step(dist, group, tensors, ps, pr, sb, rb)
    times = []
    for _ in range(args.rounds * args.steps):
        t0 = time.perf_counter_ns()
        step(dist, group, tensors, ps, pr, sb, rb)
        times.append(time.perf_counter_ns() - t0)
    if rank == 0:
        print("STEP_MS " + json.dumps(statistics.median(times) / 1e6), flush=True)
    dist.destroy_process_group()


def in_process(args) -> None:
    from diag.agent.agent import Agent
    from diag.agent.config import AgentConfig

    shm = tempfile.mkdtemp(prefix="xpu_diag-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    agent = Agent(AgentConfig(shm_dir=shm, collector=None, token="bench", job_id="bench"))
    agent.start()
    port = free_port()
    procs = []
    for rank in range(args.world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(args.world), LOCAL_RANK=str(rank), XPU_TIMER_SHM_DIR=shm,
                   PYTHONWARNINGS="ignore", XPU_TIMER_RING_CAPACITY=str(1 << 16))
        if args.hook:   # as the launcher starts a worker: the C++ hook preloaded
            env["LD_PRELOAD"] = os.path.join(ROOT, "diag", "lib", "libxpu_timer_hook.so")
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", *_pass(args)], env=env,
                                      stdout=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    agent.stop()
    shutil.rmtree(shm, ignore_errors=True)
    if any(p.returncode for p in procs):
        sys.exit("bench: a worker failed")
    result = json.loads(outputs[0].strip().splitlines()[-1])
    off = statistics.median(result["steps"]["off"]) / 1e6
    on = statistics.median(result["steps"]["on"]) / 1e6
    traced = args.ops + (args.world > 1)     # the all-reduces and the batch
    print(f"tracer on a Megatron-shaped step: {args.ops} async all_reduce of {args.numel} float32 on a "
          f"sub-group + batch_isend_irecv, {args.world} {args.backend} ranks, {args.rounds} x {args.steps} steps "
          f"per mode (median, rank 0){', hook preloaded in both modes' if args.hook else ''}")
    print(f"  untraced        {off:8.3f} ms/step")
    print(f"  traced          {on:8.3f} ms/step")
    print(f"  tracer cost     {(on - off) * 1e3:8.0f} us/step, {(on - off) * 1e6 / traced:6.0f} ns per traced op")
    print(f"  ratio           {on / off:8.3f} (traced / untraced)")
    print(f"  records dropped {result['dropped']:8d}; tracer still on: {result['enabled']}")


def launched(args) -> None:
    """Whole jobs, alternating: plain torchrun, the launcher, the launcher without the tracer."""
    exe = os.path.join(os.path.dirname(sys.executable), "xpu_timer_launch")
    launcher = [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "diag.launcher.main"]
    modes = {"torchrun": [sys.executable, "-m", "torch.distributed.run"], "launcher": launcher,
             "launcher, tracer off": launcher}
    figures = {m: [] for m in modes}
    for i in range(args.runs):
        order = list(modes) if i % 2 == 0 else list(reversed(modes))
        for mode in order:
            env = dict(os.environ, PYTHONWARNINGS="ignore")
            if mode == "launcher, tracer off":
                env["XPU_TIMER_TRACER_DISABLE"] = "1"
            cmd = modes[mode] + ["--standalone", f"--nproc-per-node={args.world}", __file__, "--job",
                                 *_pass(args)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            line = [x for x in out.stdout.splitlines() if x.startswith("STEP_MS ")]
            if out.returncode or not line:
                sys.exit(f"bench: {mode} failed (rc {out.returncode}):\n{out.stderr[-2000:]}")
            figures[mode].append(float(line[-1].split()[1]))
    print(f"whole jobs: {args.ops} async all_reduce + batch_isend_irecv a step, {args.world} {args.backend} ranks, "
          f"{args.runs} runs per mode alternating (step median of each run, rank 0)")
    base = statistics.median(figures["torchrun"])
    for mode, values in figures.items():
        med = statistics.median(values)
        print(f"  {mode:22s} {', '.join(f'{v:.2f}' for v in values)} ms; median {med:.2f} ms, "
              f"{(med / base - 1) * 100:+.1f} % against torchrun")


def _pass(args) -> list[str]:
    return ["--backend", args.backend, "--steps", str(args.steps), "--rounds", str(args.rounds), "--ops", str(args.ops),
            "--numel", str(args.numel)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2, help="ranks")
    p.add_argument("--backend", default="gloo", choices=("gloo", "nccl"),
                   help="nccl: CUDA tensors, rank r on GPU r mod the GPUs there are")
    p.add_argument("--steps", type=int, default=20, help="steps per block")
    p.add_argument("--rounds", type=int, default=12, help="off/on block pairs")
    p.add_argument("--ops", type=int, default=32, help="async all_reduces a step")
    p.add_argument("--numel", type=int, default=256, help="float32 elements per op (256: 1 KiB)")
    p.add_argument("--launcher", action="store_true", help="whole jobs: torchrun against the launcher")
    p.add_argument("--hook", action="store_true",
                   help="preload the C++ hook into the workers, as the launcher does (with NCCL the tracer "
                        "then leaves each group's ops to it after its first ones: diag/tracer/hooked.py)")
    p.add_argument("--runs", type=int, default=3, help="runs per mode with --launcher")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
    elif args.job:
        job(args)
    elif args.launcher:
        launched(args)
    else:
        in_process(args)


if __name__ == "__main__":
    main()
