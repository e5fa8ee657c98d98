"""What the launcher's exit costs with and without gc.freeze (diag/launcher/main.py).

    python bench/launcher_exit.py [--runs 8]

A process that imports torch.distributed.run, as the launcher does, then
exits: plainly, or after gc.freeze(). Both run --runs times, interleaved,
and each one's CPU (user + system, its whole life) is read from the
children's rusage. The difference is what the interpreter's collections at
exit spend walking torch's heap. Run it on a quiet machine: the 2-core VM's
figures move by a tenth from run to run.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys

VARIANTS = {"plain": "import torch.distributed.run",
            "gc.freeze": "import gc, torch.distributed.run; gc.freeze()"}


def cpu_of(code: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    args = ap.parse_args()
    if args.runs < 1:
        print(f"launcher_exit: --runs {args.runs} must be at least 1", file=sys.stderr)
        return 2
    cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.runs):
        for name, code in VARIANTS.items():
            cpu[name].append(cpu_of(code))
    for name, seconds in cpu.items():
        print(f"{name:<10} median {statistics.median(seconds):.3f} CPU-s, min {min(seconds):.3f} ({args.runs} runs)")
    saved = statistics.median(cpu["plain"]) - statistics.median(cpu["gc.freeze"])
    print(f"saved at each launch's exit: {saved:.3f} CPU-s ({saved / statistics.median(cpu['plain']):.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
