"""Our all-reduce busbw next to nccl-tests' all_reduce_perf, same size, same GPUs, one run.

    python bench/netcheck_vs_nccl_tests.py [--size 1G] [--gpus 2] [--iters 20] [--warmup 5]

Ours: netcheck's pairwise check under torchrun with two GPUs as two "nodes"
(one pair, NCCL), read from its fault list. Theirs: all_reduce_perf -g N in
one process, from PATH or $NCCL_TESTS_BIN (nccl-tests builds from source
with the NCCL headers of the nvidia-nccl-cu13 wheel; it cannot be fetched
here). Without it, prints our figure and says so. Exit 1 if we differ by
more than --tolerance (default 5%).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from diag.common.units import parse_size  # noqa: E402


def ours(size: int, gpus: int, iters: int, warmup: int) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "faults.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(gpus), "--master-port",
               str(port), "-m", "diag.netcheck.cli", "--backend", "nccl", "--size", str(size), "--iters",
               str(iters), "--warmup", str(warmup), "--compute", "off", "--output", str(out), "--no-progress"]
        res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
        if not out.exists():
            raise SystemExit(f"netcheck did not write its fault list (exit {res.returncode}):\n{res.stderr[-3000:]}")
        doc = json.loads(out.read_text())
    rec = [r for r in doc["records"] if r["metric"] == "all_reduce.busbw" and r.get("round") == 1]
    extra = rec[0]["extra"]
    mean_busbw = sum(extra["bytes"] / r["extra"]["mean_seconds"] / 1e9 * r["value"] / r["extra"]["algbw"]
                     for r in rec) / len(rec)
    return {"busbw": extra["pair_busbw"], "busbw_mean_time": mean_busbw, "bytes": extra["bytes"],
            "link": rec[0]["link"]}


def find_all_reduce_perf() -> str | None:
    env = os.environ.get("NCCL_TESTS_BIN")
    if env:
        path = Path(env)
        path = path / "all_reduce_perf" if path.is_dir() else path
        return str(path) if path.exists() else None
    return shutil.which("all_reduce_perf")


def theirs(binary: str, size: int, gpus: int, iters: int, warmup: int) -> dict:
    cmd = [binary, "-b", str(size), "-e", str(size), "-g", str(gpus), "-n", str(iters), "-w", str(warmup),
           "-d", "float", "-o", "sum"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    for line in res.stdout.splitlines():
        fields = line.split()
        if fields and not line.lstrip().startswith("#") and fields[0] == str(size) and len(fields) >= 12:
            # size count type redop root | time algbw busbw #wrong (out-of-place) | same (in-place)
            return {"busbw": float(fields[7]), "busbw_inplace": float(fields[11]), "cmd": " ".join(cmd)}
    raise SystemExit(f"could not read all_reduce_perf output (exit {res.returncode}):\n{res.stdout[-3000:]}"
                     f"\n{res.stderr[-2000:]}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="1G")
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--tolerance", type=float, default=0.05)
    args = p.parse_args()
    size = parse_size(args.size, "--size")
    mine = ours(size, args.gpus, args.iters, args.warmup)
    print(f"netcheck all_reduce busbw, {size} B, {args.gpus} GPUs ({mine['link']}): "
          f"{mine['busbw']:.2f} GB/s (median iteration), {mine['busbw_mean_time']:.2f} GB/s (mean iteration)")
    binary = find_all_reduce_perf()
    if binary is None:
        print("all_reduce_perf not found (PATH or $NCCL_TESTS_BIN): no side-by-side figure this run. "
              "Build nccl-tests (make MPI=0 NCCL_HOME=<nvidia-nccl-cu13 wheel>/nvidia/nccl) and rerun.")
        return 0
    ref = theirs(binary, size, args.gpus, args.iters, args.warmup)
    diff = (mine["busbw"] - ref["busbw"]) / ref["busbw"]
    print(f"nccl-tests all_reduce_perf busbw: {ref['busbw']:.2f} GB/s out-of-place, "
          f"{ref['busbw_inplace']:.2f} GB/s in-place  ({ref['cmd']})")
    verdict = "within" if abs(diff) <= args.tolerance else "OUTSIDE"
    print(f"difference: {diff * 100:+.1f}% ({verdict} {args.tolerance * 100:.0f}%)")
    return 0 if abs(diff) <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
