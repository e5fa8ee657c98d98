"""Python tracer overhead per traced collective, side by side in one run.

For each world size (default 1 and 2) it runs that many gloo ranks on this
machine (real processes; world 1 shows the tracer's cost against the
cheapest real collective, world 2 against loopback TCP). Each
rank runs the same all_reduce loop in alternating blocks, untraced and traced
(the tracer is patched in and out between blocks, in step on every rank),
while this process runs the real node agent draining the rings, as the
launcher would. Prints ns per op both ways, the difference (the tracer's cost
per traced collective) and the ratio, plus records dropped (should be 0).

    .venv/bin/python bench/tracer_overhead.py [--worlds 1,2] [--ops 500] [--rounds 20]
    .venv/bin/python bench/tracer_overhead.py --wrapper [--before REV]

``--wrapper`` prints only the in-process figure (the tracer's own cost on a
no-op collective); ``--before REV`` adds the wrappers of REV's
diag/tracer/collectives.py (git show), timed in the same process in
interleaved blocks, so the change between the two is a paired figure.

The rings get 65536 slots (XPU_TIMER_RING_CAPACITY) so that no record is
dropped even at this rate of tiny collectives: a dropped record is cheaper
than a written one and would flatter the figure.
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
from bench.at_revision import module_at  # noqa: E402
from diag.common.net import free_port  # noqa: E402


def worker(ops: int, rounds: int, numel: int) -> None:
    import torch
    import torch.distributed as dist

    from diag.records import format as fmt
    from diag.records.writer import RecordWriter
    from diag.tracer import collectives
    from diag.tracer.core import Tracer

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    writer = RecordWriter(os.environ["XPU_TIMER_SHM_DIR"], producer=fmt.PRODUCER_PYTHON,
                          rank=rank, local_rank=rank, world_size=dist.get_world_size(),
                          capacity=int(os.environ["XPU_TIMER_RING_CAPACITY"]))
    tracer = Tracer(writer, rank)
    tensor = torch.ones(numel)
    timings = {"off": [], "on": []}
    for _ in range(ops // 4):                  # warm-up
        dist.all_reduce(tensor)
    for i in range(rounds):
        # Alternate the order, so that neither mode always runs second.
        for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
            if mode == "on":
                collectives.patch(tracer)
            dist.barrier()
            start = time.perf_counter_ns()
            for _ in range(ops):
                dist.all_reduce(tensor)
            timings[mode].append((time.perf_counter_ns() - start) / ops)
            collectives.unpatch()
    if rank == 0:
        print(json.dumps({"timings": timings, "dropped": writer.dropped,
                          "enabled": tracer.enabled}), flush=True)
    dist.destroy_process_group()


def load_collectives(rev: str | None):
    """diag/tracer/collectives.py of this tree (rev None) or of git revision
    ``rev``, the latter on this tree's other tracer modules."""
    from diag.tracer import collectives
    if rev is None:
        return collectives
    return module_at(rev, "diag/tracer/collectives.py", "collectives_before")


def wrapper_cost(calls: int = 20000, rounds: int = 15, before: str | None = None) -> dict[str, float]:
    """The tracer's own cost, in process: torch.distributed.all_reduce on a
    1-rank gloo group with its work replaced by a no-op, traced vs untraced,
    alternating blocks (min of blocks). Gloo's own time, which swings between
    14 and 80 us per op on a shared 2-core VM, is taken out of the figure.
    ``before``: also traced by that revision's wrappers, in the same rounds.
    Returns ns per call: "off", "on" and, with ``before``, "before"."""
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from diag.records import format as fmt
    from diag.records.reader import RegionReader
    from diag.records.writer import RecordWriter
    from diag.tracer.core import Tracer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo")
    real = c10d.all_reduce
    # The tracer wraps whatever c10d.all_reduce is: make that a no-op with the
    # real signature, so only the tracer's work is timed.
    c10d.all_reduce = lambda tensor, op=None, group=None, async_op=False: None
    shm = tempfile.mkdtemp(prefix="xpu_diag-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    writer = RecordWriter(shm, producer=fmt.PRODUCER_PYTHON, rank=0, local_rank=0, world_size=1,
                          capacity=1 << 16)
    reader = RegionReader(writer.path)
    tracer, tensor = Tracer(writer, 0), torch.ones(1)
    variants = {"off": None, "on": load_collectives(None)}
    if before:
        variants["before"] = load_collectives(before)
    best = {mode: float("inf") for mode in variants}
    for i in range(rounds):
        # Alternate the order, so that no mode always runs in the same place.
        for mode in (list(variants) if i % 2 == 0 else list(reversed(variants))):
            module = variants[mode]
            if module is not None:
                module.patch(tracer)
            fn = c10d.all_reduce
            start = time.perf_counter_ns()
            for _ in range(calls):
                fn(tensor)
            best[mode] = min(best[mode], (time.perf_counter_ns() - start) / calls)
            if module is not None:
                module.unpatch()
            reader.poll()  # the agent's job: keep the ring from filling
    c10d.all_reduce = real
    dist.destroy_process_group()
    writer.close()
    shutil.rmtree(shm, ignore_errors=True)
    return best


def run(args, world: int) -> dict:
    from diag.agent.agent import Agent
    from diag.agent.config import AgentConfig

    shm = tempfile.mkdtemp(prefix="xpu_diag-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    agent = Agent(AgentConfig(shm_dir=shm, collector=None, token="bench", job_id="bench"))
    agent.start()
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world), LOCAL_RANK=str(rank), XPU_TIMER_SHM_DIR=shm,
                   PYTHONWARNINGS="ignore", XPU_TIMER_RING_CAPACITY=str(1 << 16))
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--worker", "--ops", str(args.ops), "--rounds",
             str(args.rounds), "--numel", str(args.numel)], env=env, stdout=subprocess.PIPE,
            text=True))
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    agent.stop()
    shutil.rmtree(shm, ignore_errors=True)
    if any(p.returncode for p in procs):
        sys.exit("bench: a worker failed")
    return json.loads(outputs[0].strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worlds", default="1,2", help="comma list of world sizes")
    p.add_argument("--ops", type=int, default=500, help="all_reduce calls per block")
    p.add_argument("--rounds", type=int, default=20, help="off/on block pairs (short blocks, "
                   "many of them: load drifting on a shared machine hits both modes alike)")
    p.add_argument("--numel", type=int, default=1, help="float32 elements per all_reduce")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--wrapper", action="store_true",
                   help="only the in-process figure (the tracer's own cost on a no-op collective)")
    p.add_argument("--before", metavar="REV", help="with --wrapper: also REV's wrappers, paired")
    args = p.parse_args()
    if args.worker:
        worker(args.ops, args.rounds, args.numel)
        return
    if args.wrapper:
        best = wrapper_cost(before=args.before)
        off, on = best["off"], best["on"]
        print(f"tracer cost in process (no-op collective, min of blocks): untraced {off:.0f} ns, "
              f"traced {on:.0f} ns, tracer {on - off:.0f} ns per traced collective")
        if args.before:
            was = best["before"]
            print(f"  before ({args.before}): traced {was:.0f} ns, tracer {was - off:.0f} ns; "
                  f"change {on - was:+.0f} ns ({on / was:.3f}x)")
        return
    for world in (int(w) for w in args.worlds.split(",")):
        report(args, world, run(args, world))
    # In a fresh process: the loop above leaves torch.distributed initialised.
    subprocess.run([sys.executable, __file__, "--wrapper"], check=True)


def report(args, world: int, result: dict) -> None:
    off = statistics.median(result["timings"]["off"])
    on = statistics.median(result["timings"]["on"])
    print(f"tracer overhead: gloo all_reduce of {args.numel} float32, {world} rank(s), "
          f"{args.rounds} x {args.ops} ops per mode (median of blocks, rank 0)")
    print(f"  untraced        {off:10.0f} ns/op")
    print(f"  traced          {on:10.0f} ns/op")
    print(f"  tracer cost     {on - off:10.0f} ns per traced collective")
    print(f"  ratio           {on / off:10.3f} (traced / untraced)")
    print(f"  records dropped {result['dropped']:10d}; tracer still on: {result['enabled']}")


if __name__ == "__main__":
    main()
