"""Run every benchmark that this machine can run, one after another.

    python bench/run_all.py [--only NAME ...]

Each bench prints its own figures and ratios, measured side by side in one
run; this script only sequences them and prints a one-line status for each.
GPU benches skip themselves with one line where there is no GPU; the netcheck
scale bench needs root (network namespaces).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = {
    "tracer_overhead": ["tracer_overhead.py"],
    "writer_hot_path": ["writer_hot_path.py"],
    "cpp_collective_overhead": ["cpp_collective_overhead.py"],
    "collector_ingest": ["collector_ingest.py", "--agents", "2000", "--seconds", "20"],
    "collector_relays": ["collector_ingest.py", "--agents", "2000", "--seconds", "20", "--nodes-per-relay", "32"],
    "collector_tick": ["collector_tick.py", "--agents", "2000"],
    "viewer_scale": ["viewer_scale.py"],
    "hook_cpu": ["hook_cpu_bench.py"],
    "hook_launch_gpu": ["hook_launch_bench.py"],
    "hook_step_gpu": ["hook_step_overhead.py"],
    "link_plugin": ["link_plugin_bench.py"],
    "link_step_gpu": ["link_step_pairs.py"],
    "netcheck_scale": ["netcheck_scale.py"],
    "slow_detect": ["slow_detect.py"],
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", choices=sorted(BENCHES), help="run just these")
    args = p.parse_args(argv)
    status = {}
    for name in args.only or BENCHES:
        if name == "netcheck_scale" and os.geteuid() != 0:
            status[name] = "skipped: needs root for network namespaces"
            continue
        print(f"\n===== {name}", flush=True)
        rc = subprocess.call([sys.executable, str(HERE / BENCHES[name][0]), *BENCHES[name][1:]])
        status[name] = "ok" if rc == 0 else f"exit {rc}"
    print("\n===== summary")
    for name, what in status.items():
        print(f"{name:18} {what}")
    return 0 if all(v == "ok" or v.startswith("skipped") for v in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
