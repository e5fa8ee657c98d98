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
    # NCCL chose its own network; netcheck recorded what NCCL said (diag/netcheck/ncclnet.py).
    nodes = [r for r in doc["records"] if r["metric"] == "node"]
    assert len(nodes) == n and all(r["extra"]["nccl"].get("network") and r["extra"]["nccl"].get("devices")
                                   for r in nodes), nodes
    assert all(r["extra"].get("nccl_transports") for r in busbw), busbw
    assert "NCCL: " in res.stdout, res.stdout


def test_nccl_socket_ifname_is_left_to_nccl_and_recorded(tmp_path):
    """The user's NCCL_SOCKET_IFNAME wins (here lo: one host), and the record says NCCL used it."""
    import torch
    n = torch.cuda.device_count()
    out = tmp_path / "pairwise_lo.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n), "--master-port",
           str(_free_port()), "-m", "diag.netcheck.cli", "--backend", "nccl", "--size", "64M", "--compute", "off",
           "--output", str(out), "--no-progress"]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, NCCL_SOCKET_IFNAME="lo"))
    keep = os.environ.get("NETCHECK_GPU_OUT")
    if keep:
        (Path(keep) / "pairwise_nccl_socket_ifname_lo.txt").write_text(
            f"$ NCCL_SOCKET_IFNAME=lo {' '.join(cmd)}\nexit {res.returncode}\n{res.stdout}\n{res.stderr}")
    assert out.exists(), res.stderr[-4000:]
    nodes = [r for r in json.loads(out.read_text())["records"] if r["metric"] == "node"]
    assert nodes and all(r["extra"]["nccl"]["socket_ifname"] == "lo" and
                         r["extra"]["nccl"]["bootstrap"].startswith("lo:") for r in nodes), nodes


def test_keep_a_real_nccl_init_log_for_the_parser_tests(tmp_path):
    """A 2-rank all_reduce with NCCL's INIT,NET,BOOTSTRAP log on: tests/netcheck/test_ncclnet.py reads the copy in docs/gpu-runs."""
    script = tmp_path / "init.py"
    script.write_text("import os, torch, torch.distributed as d\n"
                      "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
                      "d.init_process_group('nccl')\n"
                      "t = torch.ones(1 << 20, device='cuda')\n"
                      "d.all_reduce(t)\n"
                      "torch.cuda.synchronize()\n"
                      "d.destroy_process_group()\n")
    env = dict(os.environ, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET,BOOTSTRAP",
               NCCL_DEBUG_FILE=str(tmp_path / "nccl_init.%p.log"))
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                          str(_free_port()), str(script)], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env=env)
    assert res.returncode == 0, res.stderr[-4000:]
    from diag.netcheck.ncclnet import parse, transports
    logs = sorted(tmp_path.glob("nccl_init.*.log"))
    assert len(logs) == 2
    for k, log in enumerate(logs):
        text = log.read_text(errors="replace")
        assert parse(text).network and transports(text), text[-3000:]
        keep = os.environ.get("NETCHECK_GPU_OUT")
        if keep:
            shutil.copy(log, Path(keep) / f"nccl_init_rank{k}.log")
