"""Every netcheck GPU run for one machine, in one command, outputs into one folder.

    python bench/netcheck_gpu_session.py --out "$OUT/netcheck-$(hostname)"

1. records this host's NVML answers (fixture for tests/netcheck, via nvml_record);
2. tests/gpu/test_netcheck_switchbox.py (discovered pairs, forced failure);
3. tests/gpu/test_netcheck_pairwise.py (each GPU a node over NCCL);
4. bench/netcheck_vs_nccl_tests.py (side by side with all_reduce_perf when present).
Each step's output lands in --out; a summary is printed at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def step(name: str, cmd: list[str], out: Path, env: dict) -> int:
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=1800)
    (out / f"{name}.log").write_text(f"$ {' '.join(cmd)}\nexit {res.returncode}\n{res.stdout}\n{res.stderr}")
    tail = (res.stdout.strip().splitlines() or [""])[-1]
    print(f"{name}: exit {res.returncode}: {tail}")
    return res.returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, NETCHECK_GPU_OUT=str(out),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    py = sys.executable
    codes = [
        step("nvml_record", [py, "-m", "diag.netcheck.nvml_record", "--out", str(out / "nvml_recorded.json")],
             out, env),
        step("switchbox", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu/test_netcheck_switchbox.py"],
             out, env),
        step("pairwise", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu/test_netcheck_pairwise.py"],
             out, env),
        step("vs_nccl_tests", [py, "bench/netcheck_vs_nccl_tests.py"], out, env),
    ]
    print(f"outputs in {out}; copy nvml_recorded.json to tests/netcheck/fixtures/nvml_<machine>.json")
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
