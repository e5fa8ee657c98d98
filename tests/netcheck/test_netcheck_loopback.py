"""Two netcheck nodes on loopback (no namespaces needed): the smallest fleet, plus the GEMM check."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diag.common.net import free_port
from diag.netcheck.measure.gemm import run_gemm
from tests import preloaded

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


def test_gemm_reports_tflops_on_cpu():
    import torch
    g = run_gemm(torch.device("cpu"), shape=64, warmup=1, iters=2)
    assert g.shape == 64 and g.dtype == "float32" and g.tflops > 0 and g.seconds > 0


@pytest.mark.quiet     # two CPU GEMMs timed against each other
def test_two_healthy_nodes_with_compute_check(tmp_path):
    port = free_port()
    common = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port), "--iface", "lo",
              "--backend", "gloo", "--size", "128K", "--iters", "2", "--timeout", "20s", "--compute", "on",
              "--rel-ratio", "0.01", "--no-progress"]   # shared CI cores: GEMM speed is noise here
    procs = [subprocess.Popen([sys.executable, "-m", "diag.netcheck.cli", *common, "--node-rank", str(r),
                               "--node-name", f"lo{r}", "--output", str(tmp_path / f"f{r}.json"),
                               *(["--format", "json"] if r == 0 else [])],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=100) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[0][-3000:] + o[1][-3000:] for o in outs]
    doc = json.loads(outs[0][0])
    assert doc == json.loads((tmp_path / "f1.json").read_text())    # every node gets the same list
    gemm = [r for r in doc["records"] if r["metric"] == "gemm"]
    assert {r["node"] for r in gemm} == {"lo0", "lo1"} and all(r["value"] > 0 for r in gemm)
    assert all(r["unit"] == "TFLOP/s" for r in gemm)
    busbw = [r for r in doc["records"] if r["metric"] == "all_reduce.busbw"]
    assert len(busbw) == 2 and all(r["link"] == "lo0<->lo1" and r["value"] > 0 for r in busbw)
    ar = busbw[0]["extra"]
    # 2 ranks: busbw = algbw * 2(n-1)/n = algbw; algbw = S / t
    assert ar["algbw"] == pytest.approx(ar["bytes"] / ar["seconds"] / 1e9)
    assert busbw[0]["value"] == pytest.approx(ar["algbw"])
    assert doc["faulty"] == [] and doc["summary"]["rounds"] == 1


def test_nproc_per_node_starts_units_through_torchrun(tmp_path):
    """netcheck --nproc-per-node runs torchrun in-process; children find the agent's store."""
    out = tmp_path / "faults.json"
    res = preloaded.run(["-m", "diag.netcheck.cli", "--nnodes", "1", "--nproc-per-node", "2",
                         "--master-port", str(free_port()), "--iface", "lo", "--size", "128K", "--iters", "2",
                         "--node-name", "hostA", "--output", str(out), "--no-progress", "--rel-ratio", "0.01"],
                        REPO, timeout=100)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["summary"]["joined"] == 2 and doc["faulty"] == []
    assert {r["link"] for r in doc["records"] if r["metric"] == "all_reduce.busbw"} == {"hostA:proc0<->hostA:proc1"}


def test_sigterm_during_nproc_per_node_is_one_line_and_no_orphans(tmp_path):
    """SIGTERM mid-measurement: torchrun stops the children; netcheck says so in one
    line and exits 128+15 (it used to print torchrun's SignalException traceback)."""
    import signal
    import time
    proc = subprocess.Popen([sys.executable, "-m", "diag.netcheck.cli", "--nnodes", "1", "--nproc-per-node", "2",
                             "--master-port", str(free_port()), "--iface", "lo", "--size", "64M",
                             "--iters", "100000", "--timeout", "600s"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        lines = []
        for line in proc.stderr:        # measuring once the first round is announced
            lines.append(line)
            if "round 1:" in line:
                break
        children = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == proc.pid]
        assert children, "".join(lines)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "Traceback" not in err and "node rank 0: stopped by signal 15" in err, err[-3000:]
    for child in children:
        assert not os.path.exists(f"/proc/{child}") or _state(child) == "Z"


def _parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_child_argv_drops_rendezvous_options():
    from diag.netcheck.spawn import child_argv
    argv = ["--nnodes", "2", "--node-rank=1", "--master-addr", "h0", "--master-port=29500", "--nproc-per-node",
            "8", "--size", "1G", "--output", "f.json"]
    assert child_argv(argv) == ["--size", "1G", "--output", "f.json"]


def test_switchbox_results_of_every_host_reach_the_job_wide_list(tmp_path):
    # forked with torch imported (tests/preloaded.py): each node imports it
    fixtures = Path(__file__).parent / "fixtures"
    port = free_port()
    boxes = {0: "nvml_synthetic_h200x4_healthy.json", 1: "nvml_synthetic_h200x4_faulty.json"}
    procs = [preloaded.Forked(["-m", "diag.netcheck.cli", "--switchbox-check", "--nvml-replay",
                               str(fixtures / boxes[r]), "--nnodes", "2", "--node-rank", str(r), "--master-addr",
                               "127.0.0.1", "--master-port", str(port), "--iface", "lo", "--size", "128K",
                               "--iters", "2", "--node-name", f"box{r}", "--rel-ratio", "0.01", "--no-progress",
                               "--output", str(tmp_path / f"f{r}.json")], dict(os.environ), str(REPO))
             for r in (0, 1)]
    outs = [p.communicate(timeout=100) for p in procs]
    assert [p.returncode for p in procs] == [1, 1], outs
    doc = json.loads((tmp_path / "f0.json").read_text())
    assert [f["node"] for f in doc["faulty"]] == ["box1"] and "NVLINK_DOWN" in doc["faulty"][0]["reason"]
    assert {r["node"] for r in doc["records"] if r["metric"].startswith("nvml.")} == {"box1"}
    assert set(doc["summary"]["switchbox"]) == {"box0", "box1"}
