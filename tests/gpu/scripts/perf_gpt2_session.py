"""GPU evidence for the performance view (docs/metrics.md), on 2 GPUs.

Runs perf_gpt2_worker.py under `xpu_timer_launch --metrics-port` and, at the
end of each phase (GPT-2 DDP; big matmuls + a 256 MiB all-reduce), saves the
agent's /metrics, `xpu-diag top --once`, and a summary of the figures per rank:

    python3 tests/gpu/scripts/perf_gpt2_session.py OUT_DIR

OUT_DIR/metrics-<phase>.txt, top-<phase>.txt, summary.json. Exits 0 with a
"skip" line when fewer than 2 GPUs are visible.
"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)
from diag.common.atomic import write_atomic  # noqa: E402
from diag.common.net import free_port  # noqa: E402

WORKER = os.path.join(ROOT, "tests", "gpu", "scripts", "perf_gpt2_worker.py")
SERIES = re.compile(r'^(xpu_diag_\w+)\{([^}]*)\} (\S+)$', re.M)


def gpus() -> int:
    try:
        import torch
        return torch.cuda.device_count()
    except Exception:
        return 0


def summarize(text: str) -> dict:
    """rank -> the figures a dashboard shows."""
    out: dict = {}
    for name, labels, value in SERIES.findall(text):
        lab = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        row = out.setdefault(lab["rank"], {})
        if name == "xpu_diag_gemm_flops_per_second":
            row["gemm_tflops"] = round(float(value) / 1e12, 1)
        elif name == "xpu_diag_op_busbw_bytes_per_second" and lab["op"] == "ncclAllReduce":
            row["allreduce_busbw_GBps"] = round(float(value) / 1e9, 1)
        elif name == "xpu_diag_collective_wait_ratio":
            row["wait_share"] = round(float(value), 3)
        elif name == "xpu_diag_step_seconds":
            row["step_ms"] = round(float(value) * 1e3, 2)
        elif name == "xpu_diag_op_duration_seconds" and lab["op"] == "ncclAllReduce":
            which = {"0.5": "p50", "0.99": "p99"}.get(lab["quantile"], lab["quantile"])
            row[f"allreduce_{which}_ms"] = round(float(value) * 1e3, 3)
    return out


def wait_file(path, proc, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(path):
            return True
        time.sleep(0.5)
    return False


def main() -> int:
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    if gpus() < 2:
        print("skip: fewer than 2 GPUs")
        return 0
    port, timeline = free_port(), os.path.join(out, "timeline")
    cmd = [sys.executable, "-m", "diag.launcher.main", "--nproc-per-node", "2", "--rdzv-id", "perfgpu",
           "--metrics-port", str(port), "--metrics-addr", "127.0.0.1", "--perf-window", "10s",
           "--timeline-path", timeline, WORKER, out]
    log = open(os.path.join(out, "job.log"), "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    summary = {"command": " ".join(cmd)}
    try:
        for name in ("gpt2", "matmul"):
            if not wait_file(os.path.join(out, f"ready-{name}"), proc):
                print(f"phase {name}: never ready; see job.log")
                return 1
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            write_atomic(os.path.join(out, f"metrics-{name}.txt"), text.encode())
            top = subprocess.run([sys.executable, "-m", "diag.cli", "top", "--job",
                                  os.path.join(timeline, "perfgpu"), "--once", "--sort", "rank"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "COLUMNS": "150"})
            write_atomic(os.path.join(out, f"top-{name}.txt"), (top.stdout + top.stderr).encode())
            summary[name] = summarize(text)
            print(name, json.dumps(summary[name]))
            print(top.stdout)
            open(os.path.join(out, f"ack-{name}"), "w").close()
        summary["exit"] = proc.wait(180)
    finally:
        if proc.poll() is None:
            proc.kill()
        write_atomic(os.path.join(out, "summary.json"), (json.dumps(summary, indent=1) + "\n").encode())
    return 0 if summary.get("exit") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
