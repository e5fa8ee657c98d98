"""Per-event cost of the NCCL profiler plugin (docs/link.md), on CPU.

    python3 bench/link_plugin_bench.py [--ops 200000] [--steps 8] [--rounds 7] [--no-callgrind]

The fake NCCL's plugin driver (tests/kernel_hook/fake/fake_nccl_profiler.cc)
plays send+receive proxy ops of --steps steps in a loop on one thread, making
the calls NCCL's proxy thread makes per step (start, SendGPUWait, SendWait,
stop; start, RecvWait, RecvFlushWait, RecvGPUWait, stop) and per op (start,
stop): 4 + 9 x steps events per op pair. Run side by side, interleaved round
by round: without a plugin (NCCL_PROFILER_PLUGIN unset: the driver's own loop)
and with ours; prints the median ns per event of each and what the plugin
adds. Then callgrind (instructions in fake_prof_bench only, marginal per event
from two loop lengths): the same from run to run, where wall times on a loaded
machine are not.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests", "kernel_hook")
LINKPROG = os.path.join(TESTS, "build", "progs", "linkprog")
PLUGIN = os.path.join(ROOT, "diag", "lib", "libxpu_nccl_profiler.so")
VARIANTS = ("none", "plugin")


def build() -> None:
    for d in (os.path.join(ROOT, "kernel_hook"), TESTS):
        subprocess.run(["make", "-s", "-C", d], check=True)


def env_for(variant: str, shm_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XPU_TIMER_", "FAKE_", "NCCL_", "LD_PRELOAD"))}
    env.update(RANK="0", WORLD_SIZE="1", XPU_TIMER_SHM_DIR=shm_dir)
    if variant == "plugin":
        env["NCCL_PROFILER_PLUGIN"] = PLUGIN
    return env


def wall(variant: str, ops: int, steps: int, shm_dir: str) -> float:
    out = subprocess.run([LINKPROG, "bench", str(ops), str(steps)], env=env_for(variant, shm_dir),
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"ns_per_event ([\d.]+)", out).group(1))


def callgrind_ir(variant: str, ops: int, steps: int, shm_dir: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        "--toggle-collect=fake_prof_bench", LINKPROG, "bench", str(ops), str(steps)],
                       env=env_for(variant, shm_dir), capture_output=True, text=True, check=True)
        text = open(out).read()
        return int(re.search(r"^summary: (\d+)", text, re.M).group(1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=200000)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-callgrind", action="store_true")
    args = ap.parse_args(argv)
    build()
    events_per_op = 4 + 9 * args.steps
    shm_dir = tempfile.mkdtemp(prefix="link-bench-")
    try:
        results: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for r in range(args.rounds):
            for v in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
                results[v].append(wall(v, args.ops, args.steps, shm_dir))
        med = {v: statistics.median(x) for v, x in results.items()}
        diffs = [p - n for p, n in zip(results["plugin"], results["none"])]
        print(f"wall, {args.rounds} interleaved rounds of {args.ops} op pairs x {events_per_op} events:")
        for v in VARIANTS:
            print(f"  {v:7s} median {med[v]:7.2f} ns/event  (runs: {', '.join(f'{x:.2f}' for x in results[v])})")
        print(f"  plugin adds {statistics.median(diffs):+.2f} ns/event (paired per round, median; "
              f"range {min(diffs):+.2f} .. {max(diffs):+.2f})")
        if not args.no_callgrind and shutil.which("valgrind"):
            small, big = args.ops // 20, args.ops // 10
            print("callgrind, marginal instructions per event (fake_prof_bench only):")
            ir = {}
            for v in VARIANTS:
                a, b = callgrind_ir(v, small, args.steps, shm_dir), callgrind_ir(v, big, args.steps, shm_dir)
                ir[v] = (b - a) / ((big - small) * events_per_op)
                print(f"  {v:7s} {ir[v]:7.1f} Ir/event")
            print(f"  plugin adds {ir['plugin'] - ir['none']:+.1f} Ir/event")
    finally:
        shutil.rmtree(shm_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
