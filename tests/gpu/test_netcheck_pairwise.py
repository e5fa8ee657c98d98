"""The pairwise check over NCCL with each GPU as one "node" (torchrun, one process per GPU).

Run (lead, on the GPU machine):  python -m pytest -q tests/gpu/test_netcheck_pairwise.py
NETCHECK_GPU_OUT=DIR keeps the fault list and output for docs/netcheck.md.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.gpus(2), pytest.mark.timeout(900)]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_gpu_is_a_node_over_nccl(tmp_path):
    import torch
    n = torch.cuda.device_count()
    out = tmp_path / "pairwise.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n), "--master-port",
           str(_free_port()), "-m", "diag.netcheck.cli", "--backend", "nccl", "--size", "1G",
           "--output", str(out), "--no-progress"]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=800)
    keep = os.environ.get("NETCHECK_GPU_OUT")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / "pairwise_nccl.txt").write_text(f"$ {' '.join(cmd)}\nexit {res.returncode}\n"
                                                      f"{res.stdout}\n{res.stderr}")
        if out.exists():
            shutil.copy(out, Path(keep) / "pairwise_nccl.json")
    assert out.exists(), res.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["summary"]["backend"] == "nccl" and doc["summary"]["joined"] == n
    busbw = [r for r in doc["records"] if r["metric"] == "all_reduce.busbw"]
    assert busbw and all(r["value"] > 1.0 for r in busbw), busbw      # GB/s: NVLink/PCIe, not a CPU copy
    sendrecv = [r for r in doc["records"] if r["metric"] == "sendrecv.busbw"]
    assert sendrecv and all(r["value"] > 1.0 for r in sendrecv)
    gemm = [r for r in doc["records"] if r["metric"] == "gemm"]
    assert len(gemm) == n and all(r["value"] > 50 for r in gemm)       # TFLOP/s, bf16 8192^3
    assert res.returncode == 0, f"healthy GPUs were judged faulty: {doc['faulty']}"
