"""H200 x2: the merged timeline of 5 GPT-2-small DDP steps under xpu_timer_launch.
    TIMELINE_OUT=/tmp/timeline_gpt2.json python3 -m pytest -q -s tests/gpu/test_timeline_gpt2.py
Every GEMM and NCCL call is device-timed (--hook-time-every 1); each step is a
traced host function (train_step). While the job is held after its steps,
``xpu-diag timeline`` fetches the last 60 s; the test checks the file
(tests/timeline/trace_check.py), that both ranks have their 5 steps with
GEMM and NCCL spans inside them, and prints per-step figures and how far apart
the two ranks see the same all-reduce end (the alignment error on one host)."""

import json
import os
import statistics
import subprocess
import sys

import pytest

from tests.functional.launch import Launch
from tests.gpu.conftest import ROOT, SCRIPTS
from tests.timeline.trace_check import check

pytestmark = pytest.mark.gpus(2)
SLACK_US = 5000   # device spans are placed by when the drainer saw them end


def test_timeline_of_five_gpt2_steps(hook_built, tmp_path):
    out = os.environ.get("TIMELINE_OUT") or str(tmp_path / "timeline_gpt2.json")
    job = Launch(["--nproc-per-node", "2", "--hook-time-every", "1", "--rdzv-id", "gpt2tl",
                  "--timeline-path", str(tmp_path / "tl"), os.path.join(SCRIPTS, "timeline_gpt2.py"),
                  "120"], env={"XPU_TIMER_HOST_TRACING_FUNC": "timeline_step@@train_step"})
    try:
        for rank in range(2):
            assert job.wait_line(rf"^STEPS_DONE rank={rank}", 400), job.output()[-4000:]
        proc = subprocess.run([sys.executable, "-m", "diag.cli", "timeline", "--job",
                               str(tmp_path / "tl" / "gpt2tl"), "--last", "60s", "--out", out],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        print(proc.stdout, proc.stderr)
        assert proc.returncode == 0
    finally:
        job.kill()
    with open(out) as f:
        doc = json.load(f)
    tracks = check(doc)
    allreduce_ends = {}
    for rank in range(2):
        events = [e for (pid, _), evs in tracks.items() if pid == rank + 1 for e in evs]
        steps = sorted((e for e in events if e["name"] == "train_step"), key=lambda e: e["ts"])[-5:]
        assert len(steps) == 5, [e["name"] for e in events][:50]
        for i, s in enumerate(steps):
            inside = [e for e in events if e["cat"] == "gpu"
                      and s["ts"] - SLACK_US <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + SLACK_US]
            gemms = [e for e in inside if e["args"]["kind"] == "gemm"]
            nccl = [e for e in inside if e["args"]["kind"] == "collective"]
            tflops = [e["args"]["flops"] / e["dur"] / 1e6 for e in gemms if e["dur"] > 0 and e["args"].get("flops")]
            print(f"rank {rank} step {i}: {s['dur'] / 1e3:.1f} ms; {len(gemms)} GEMMs, "
                  f"{sum(e['dur'] for e in gemms) / 1e3:.1f} ms device, median "
                  f"{statistics.median(tflops) if tflops else 0:.0f} TFLOP/s; {len(nccl)} NCCL, "
                  f"{sum(e['dur'] for e in nccl) / 1e3:.1f} ms device")
            assert len(gemms) > 50 and nccl, (rank, i)
            for e in nccl:
                allreduce_ends.setdefault((e["args"]["comm"], e["args"]["seq"]), {})[rank] = e["ts"] + e["dur"]
    gaps = [abs(v[0] - v[1]) for v in allreduce_ends.values() if len(v) == 2]
    print(f"same NCCL op, end seen on rank 0 vs rank 1: median {statistics.median(gaps):.0f} us, "
          f"max {max(gaps):.0f} us over {len(gaps)} ops; file {out} ({os.path.getsize(out)} bytes)")
    assert gaps and statistics.median(gaps) < SLACK_US
