"""Cost of tracing collectives issued from C++ on gloo (diag/tracer/dispatch.py), paired in one run.

One process, a 1-rank gloo group, a real record ring drained between blocks.
Two paths, each timed in alternating blocks with the dispatcher kernel in and
out (registered and removed between blocks, never inside one):

* C++-issued: ``ProcessGroup.allreduce([t]).wait()``. The process group's
  C++ method, then the dispatcher: the path DDP's reducer and its buffer
  broadcast take (they call the same C++ method). Without the kernel this
  collective is not traced at all; with it, START and END are written.
* Python-issued: ``dist.all_reduce(t)`` with the Python wrappers patched
  in both modes; the kernel only hands on (the wrapper already recorded it).
  This is what the kernel adds to calls that were traced before.

Prints per path: ns per op both ways (median of blocks), the paired figure
(median over block pairs of on - off), its interquartile range, and the ratio.

    .venv/bin/python bench/cpp_collective_overhead.py [--ops 400] [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from diag.common.net import free_port  # noqa: E402


def measure(ops: int, rounds: int) -> dict:
    import torch
    import torch.distributed as dist

    from diag.records import format as fmt
    from diag.records.reader import RegionReader
    from diag.records.writer import RecordWriter
    from diag.tracer import collectives, dispatch
    from diag.tracer.core import Tracer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo")
    shm = tempfile.mkdtemp(prefix="xpu_diag-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    writer = RecordWriter(shm, producer=fmt.PRODUCER_PYTHON, rank=0, local_rank=0, world_size=1,
                          capacity=1 << 16)
    reader = RegionReader(writer.path)
    tracer, tensor, pg = Tracer(writer, 0), torch.ones(1), dist.group.WORLD
    groups = collectives.GroupInfo(dist.distributed_c10d)
    records = 0

    def cpp_issued():
        for _ in range(ops):
            pg.allreduce([tensor]).wait()

    def python_issued():
        for _ in range(ops):
            dist.all_reduce(tensor)

    out = {}
    for path, body, python_wrappers in (("C++-issued", cpp_issued, False), ("Python-issued", python_issued, True)):
        if python_wrappers:
            collectives.patch(tracer)
        dispatch.uninstall()
        body()  # warm-up
        times = {"off": [], "on": []}
        for i in range(rounds):
            for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
                if mode == "on":
                    dispatch.register(tracer, groups)
                start = time.perf_counter_ns()
                body()
                times[mode].append((time.perf_counter_ns() - start) / ops)
                dispatch.uninstall()
                time.sleep(0.02)   # let the last END callbacks land before the ring is drained
                records += len(reader.poll())
        collectives.unpatch()
        out[path] = times
    out["_records"] = records
    out["_dropped"] = writer.dropped
    out["_enabled"] = tracer.enabled
    dist.destroy_process_group()
    writer.close()
    shutil.rmtree(shm, ignore_errors=True)
    return out


def quartiles(values):
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=400, help="all_reduce calls per block")
    p.add_argument("--rounds", type=int, default=30, help="off/on block pairs")
    args = p.parse_args()
    result = measure(args.ops, args.rounds)
    print(f"tracing collectives issued from C++ (dispatcher kernel), gloo all_reduce of 1 float32, 1 rank, "
          f"{args.rounds} x {args.ops} ops per mode")
    for path in ("C++-issued", "Python-issued"):
        off, on = result[path]["off"], result[path]["on"]
        paired = [b - a for a, b in zip(off, on)]
        lo, hi = quartiles(paired)
        print(f"  {path:14s} kernel out {statistics.median(off):8.0f} ns/op, in {statistics.median(on):8.0f} ns/op "
              f"(min of blocks {min(off):.0f} / {min(on):.0f}); paired +{statistics.median(paired):.0f} ns per call "
              f"(IQR {lo:.0f} .. {hi:.0f}), ratio {statistics.median(on) / statistics.median(off):.3f}")
    print(f"  records written {result['_records']}, dropped {result['_dropped']}; "
          f"tracer still on: {result['_enabled']}")


if __name__ == "__main__":
    main()
