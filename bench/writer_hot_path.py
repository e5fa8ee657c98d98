"""The Python record writer's per-op cost, this tree's against another
revision's, side by side in one run.

    .venv/bin/python bench/writer_hot_path.py [--before REV] [--ops 20000] [--rounds 15]

Each round times ``ops`` START/END pairs (what every traced host function
call and collective costs the writer) with each writer in turn, interleaved,
the order alternating: host functions and collectives into a ring the reader
drains between blocks (the common path), and host functions into a full ring
no one drains (the drop path: a host function called faster than the agent
reads). Prints the median and the
min ns per pair for each (the min: the least disturbed block on a shared
machine) and the change. --before loads diag/records/writer.py of REV (git
show) beside this tree's, on this tree's format module.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.at_revision import module_at  # noqa: E402
from diag.records import format as fmt  # noqa: E402
from diag.records.reader import RegionReader  # noqa: E402


def load_writer(rev: str | None):
    """RecordWriter of this tree (rev None) or of git revision ``rev``."""
    if rev is None:
        from diag.records.writer import RecordWriter
        return RecordWriter
    return module_at(rev, "diag/records/writer.py", "writer_before").RecordWriter


def block(writer, ops: int, kind: int) -> float:
    """ns per START/END pair over ``ops`` pairs."""
    start, end = writer.start, writer.end
    t0 = time.perf_counter_ns()
    for _ in range(ops):
        op = start(kind, "tick")
        end(op, kind, "tick", 1)
    return (time.perf_counter_ns() - t0) / ops


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", metavar="REV", help="also the writer of this git revision")
    p.add_argument("--ops", type=int, default=20000, help="START/END pairs per block")
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args(argv)
    variants = {"this tree": load_writer(None)}
    if a.before:
        variants[f"before ({a.before})"] = load_writer(a.before)
    paths = ("drained, host function", "drained, collective", "full, host function")
    samples = {(name, path): [] for name in variants for path in paths}
    with tempfile.TemporaryDirectory(prefix="writer-bench-") as shm:
        rings = {}
        for i, (name, cls) in enumerate(variants.items()):
            roomy = cls(os.path.join(shm), producer=fmt.PRODUCER_PYTHON, rank=2 * i, local_rank=0,
                        world_size=2 * len(variants), capacity=1 << (4 * a.ops - 1).bit_length())
            full = cls(os.path.join(shm), producer=fmt.PRODUCER_PYTHON, rank=2 * i + 1, local_rank=0,
                       world_size=2 * len(variants), capacity=256)
            block(full, 1000, fmt.KIND_HOST_FUNC)   # fill it: from here on every record is dropped
            rings[name] = (roomy, RegionReader(roomy.path), full)
        for r in range(a.rounds):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in order:
                roomy, reader, full = rings[name]
                samples[(name, paths[0])].append(block(roomy, a.ops, fmt.KIND_HOST_FUNC))
                reader.drain()
                samples[(name, paths[1])].append(block(roomy, a.ops, fmt.KIND_COLLECTIVE))
                reader.drain()
                samples[(name, paths[2])].append(block(full, a.ops, fmt.KIND_HOST_FUNC))
    for what, pick in (("median", statistics.median), ("min", min)):
        print(f"writer START/END pair, ns ({what} of {a.rounds} interleaved rounds of {a.ops} pairs):")
        fig = {k: pick(v) for k, v in samples.items()}
        for path in paths:
            cells = "  ".join(f"{name} {fig[(name, path)]:7.0f}" for name in variants)
            change = ""
            if a.before:
                this, before = fig[("this tree", path)], fig[(f"before ({a.before})", path)]
                change = f"   change {this - before:+.0f} ns ({this / before:.3f}x)"
            print(f"  {path:23}: {cells}{change}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
