"""How fast a planted slowdown is named, and how many verdicts a healthy job gets.

    python bench/slow_detect.py [--window 20s] [--ranks 8] [--healthy-minutes 10]

Real launcher, agent and collector on this machine. Planted cases, one job
each, with the slowdown starting mid-run (so warm-up is not counted):
  gemm5 / gemm10 / gemm25: one rank's GEMMs run 5/10/25 % slower (TFLOP/s that
    much under; the fake CUDA runtime's device delays, hook timing every GEMM);
  sleep20: one gloo rank sleeps about 20 % of each step (a straggler).
A healthy gloo job (with a checkpoint pause every few windows) runs beside them
for --healthy-minutes. Prints, per case, the seconds from the slowdown to the
SLOW line, in windows, and which rank/rule was named; and the healthy job's
verdict count. Targets (issue 10): gemm10 and sleep20 named within 2 windows,
healthy 0.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from diag.common.units import parse_duration  # noqa: E402
from bench.launch_job import Launch  # noqa: E402

HOOKPROG = os.path.join(ROOT, "tests", "kernel_hook", "build", "progs", "hookprog")
TRAIN = os.path.join(ROOT, "tests", "scripts", "slow_train.py")
SLOW_RANK = 3


def _gemm_case(tmp, name, window, ranks, percent):
    run_s = 5 * window
    return Launch(["--nproc-per-node", str(ranks), "--rdzv-id", name, "--timeline-path", tmp,
                   "--perf-window", f"{window}s", "--hook-time-every", "1", "--no-python", HOOKPROG,
                   "train", str(run_s), "4000"],
                  env={"XPU_TIMER_TRACER_DISABLE": "1", "SLOW_RANK": str(SLOW_RANK),
                       "SLOW_FACTOR": f"{1 / (1 - percent / 100):.6f}", "SLOW_AFTER": str(1.5 * window)})


def _sleep_case(tmp, window, ranks):
    # the rank measures its own step until the phase starts, then sleeps 20 % of it
    start = 1.5 * window
    return Launch(["--nproc-per-node", str(ranks), "--rdzv-id", "sleep20", "--timeline-path", tmp,
                   "--perf-window", f"{window}s", "--no-hook", TRAIN],
                  env={"SLOW_RANK": str(SLOW_RANK), "SLOW_SHARE": "0.2", "SLOW_PHASES": f"{start}-100000",
                       "RUN_S": str(5 * window)})


def _healthy(tmp, window, ranks, minutes):
    return Launch(["--nproc-per-node", str(ranks), "--rdzv-id", "healthy", "--timeline-path", tmp,
                   "--perf-window", f"{window}s", "--no-hook", TRAIN],
                  env={"PAUSE_AT": str(2 * window), "PAUSE_S": str(window / 2), "SOLO_S": str(window / 4),
                       "RUN_S": str(60 * minutes)})


def _verdict(launch: Launch, started: str):
    """(seconds from the slowdown to the first SLOW line, that line) or Nones."""
    t0 = [when for when, _, line in launch.lines if re.search(started, line)]
    hits = [(when, line) for when, _, line in launch.lines if "SLOW: " in line]
    if not t0 or not hits:
        return None, hits[0][1] if hits else None
    return hits[0][0] - t0[0], hits[0][1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--window", default="20s")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--healthy-minutes", type=float, default=10.0)
    args = p.parse_args(argv)
    window = parse_duration(args.window, "--window")
    if not os.access(HOOKPROG, os.X_OK):
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "kernel_hook")], check=True)
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "tests", "kernel_hook")], check=True)
    tmp = tempfile.mkdtemp(prefix="slow-bench-")
    healthy = _healthy(tmp, window, 4, args.healthy_minutes)
    print(f"window {window:g} s; {args.ranks} ranks; planted rank {SLOW_RANK}; events under {tmp}", flush=True)
    print(f"{'case':<8} {'to verdict':>11} {'windows':>8}  named", flush=True)
    try:
        for name, make, started in (
                *[(f"gemm{x}", lambda x=x: _gemm_case(tmp, f"gemm{x}", window, args.ranks, x),
                   r"GEMMs .* slower from now") for x in (5, 10, 25)],
                ("sleep20", lambda: _sleep_case(tmp, window, args.ranks), r"sleeping .* from now")):
            launch = make()
            launch.wait(20 * window)
            secs, line = _verdict(launch, started)
            named = line[line.index("SLOW: "):][:110] if line else "(none)"
            shown = f"{secs:10.1f}s {secs / window:8.2f}" if secs is not None else f"{'-':>11} {'-':>8}"
            print(f"{name:<8} {shown}  {named}", flush=True)
        healthy.wait(60 * args.healthy_minutes + 20 * window)
        false = healthy.matching(r"SLOW: |HANG: ")
        print(f"healthy  {args.healthy_minutes:g} min, 4 ranks, one checkpoint pause: {len(false)} verdict(s)"
              + "".join(f"\n    {line}" for line in false), flush=True)
    finally:
        healthy.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
