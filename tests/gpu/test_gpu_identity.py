"""Issue 20 on one GPU: two ranks share GPU 0 (rank 1 limited to a quarter of
the SMs by CUDA MPS where the machine runs it), under xpu_timer_launch with
the hook. Both are named by the GPU's real PCI bus id and UUID (as nvidia-smi
gives them) and their sharing is said once; a real NVML sample of the loaded
GPU is on /metrics; a SLOW verdict, if the MPS limit makes one, names the GPU
and invents no throttle; the recorder writes a recording the replay reads.
Issue 34 item 6 (`-k no_set_device`, session.sh x1nosetdev): two ranks on
cuda:0 that never call set_device are named by the hook's DEVICE records: the
planted slow rank's SLOW line and a GPU-kernel hang's HANG line name the card
and say both ranks share it.

    python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_gpu_identity.py

Outputs (launcher log, /metrics text, slow.json, the recording) go to
$GPU_RUNS_OUT when set (docs/gpu-runs/), else a temp dir.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from tests.gpu.conftest import ROOT, SCRIPTS


def _pythonpath() -> str:
    return os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))


def _out(tmp_path) -> str:
    out = os.environ.get("GPU_RUNS_OUT") or str(tmp_path / "out")
    os.makedirs(out, exist_ok=True)
    return out


def smi_gpu0() -> dict:
    text = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id,uuid", "--format=csv,noheader", "-i", "0"],
                          capture_output=True, text=True, timeout=30).stdout.strip()
    index, bus, uuid = [p.strip() for p in text.split(",")]
    domain, rest = bus.lower().split(":", 1)
    return {"index": int(index), "bus": f"{int(domain, 16):04x}:{rest}", "uuid": uuid}


class Mps:
    """The CUDA MPS control daemon in a private pipe directory, if this machine allows one."""

    def __init__(self, tmp) -> None:
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp / "mps-pipe"), "CUDA_MPS_LOG_DIRECTORY": str(tmp / "mps-log")}
        for d in self.env.values():
            os.makedirs(d, exist_ok=True)
        exe = shutil.which("nvidia-cuda-mps-control")
        self.on = exe is not None and subprocess.run(
            [exe, "-d"], env={**os.environ, **self.env}, capture_output=True, timeout=30).returncode == 0
        self.why = "" if self.on else ("nvidia-cuda-mps-control not found" if exe is None else "MPS daemon refused")

    def stop(self) -> None:
        if self.on:
            subprocess.run(["nvidia-cuda-mps-control"], input=b"quit\n", env={**os.environ, **self.env},
                           capture_output=True, timeout=30)


def _scrape(port, until, got):
    while time.monotonic() < until:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            if "xpu_diag_gpu_power_watts{" in text:
                got.append(text)
        except OSError:
            pass
        time.sleep(2)


def test_two_ranks_on_one_gpu_named_by_bus_id_and_sampled(tmp_path, hook_built):
    from diag.common.net import free_port
    truth, out, port = smi_gpu0(), _out(tmp_path), free_port()
    mps = Mps(tmp_path)
    env = {**os.environ, **mps.env, "PYTHONPATH": _pythonpath(), "RUN_S": "45", "MPS_RANK": "1" if mps.on else "-1"}
    scraped: list[str] = []
    scraper = threading.Thread(target=_scrape, args=(port, time.monotonic() + 50, scraped), daemon=True)
    scraper.start()
    try:
        proc = subprocess.run([sys.executable, "-m", "diag.launcher.main", "--nproc-per-node", "2", "--rdzv-id", "share",
                               "--timeline-path", str(tmp_path / "tl"), "--perf-window", "15s", "--hook-time-every", "1",
                               "--metrics-port", str(port), "--gpu-sample-interval", "2s",
                               os.path.join(SCRIPTS, "gpu_share.py")],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    finally:
        mps.stop()
    scraper.join(60)
    log = proc.stdout + proc.stderr
    with open(os.path.join(out, "gpu_share.log"), "w") as f:
        f.write(f"# MPS: {'rank 1 at 25% of the SMs' if mps.on else mps.why}\n# nvidia-smi GPU 0: {truth}\n{log}")
    print(log[-4000:])
    assert proc.returncode == 0, log[-3000:]
    phrase = f"gpu {truth['bus']} ({truth['uuid'][:12]}..., nvidia-smi index {truth['index']})"
    share = [ln for ln in log.splitlines() if ln.startswith("GPU: ranks 0-1 share one GPU")]
    assert share == [f"GPU: ranks 0-1 share one GPU on node 0: {phrase} (each gets a share of its SMs and memory)"], log
    assert scraped, "no xpu_diag_gpu_* sample on /metrics"
    text = scraped[-1]
    with open(os.path.join(out, "gpu_share.metrics.txt"), "w") as f:
        f.write(text)
    power = re.findall(r'^xpu_diag_gpu_power_watts\{([^}]*)\} (\S+)$', text, re.M)
    assert sorted(dict(re.findall(r'(\w+)="([^"]*)"', labels))["rank"] for labels, _ in power) == ["0", "1"]
    for labels, value in power:
        lb = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        assert (lb["gpu"], lb["gpu_uuid"], lb["nvidia_smi_index"]) == (truth["bus"], truth["uuid"], str(truth["index"]))
        assert float(value) > 100, f"a GPU under bf16 GEMMs draws more than 100 W: {value}"
    clocks = re.findall(r'^xpu_diag_gpu_sm_clock_hertz\{[^}]*\} (\S+)$', text, re.M)
    assert clocks and all(float(c) > 5e8 for c in clocks), clocks
    for line in (ln for ln in log.splitlines() if "SLOW: " in ln):
        assert phrase in line and ("no throttle reported" in line or "throttled: " in line), line
    for path in glob.glob(str(tmp_path / "tl" / "share" / "*" / "slow.json")):
        shutil.copy(path, os.path.join(out, "gpu_share." + os.path.basename(os.path.dirname(path)) + ".slow.json"))


def test_the_recorder_records_this_gpu(tmp_path):
    from diag.gpu import sample
    from diag.gpu.nvml import ReplayNvml
    truth, out = smi_gpu0(), _out(tmp_path)
    path = os.path.join(out, "nvml_recorded.json")
    proc = subprocess.run([sys.executable, "-m", "diag.gpu.record", "--out", path, "--steps", "8"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": _pythonpath()}, capture_output=True, text=True, timeout=300)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    nvml = ReplayNvml(path)
    ident = sample.identity_of(nvml, truth["index"])
    assert (ident.pci_bus_id, ident.uuid) == (truth["bus"], truth["uuid"])
    s = sample.read(nvml, truth["index"], time.time())
    assert s.sm_clock_mhz and s.sm_clock_max_mhz and s.power_w and s.throttle_reasons is not None, s
    doc = json.load(open(path))
    assert "GEMMs on every GPU" in doc["source"], doc["source"]


def _no_set_device_verdict(tmp_path, rdzv, env, extra, verdict, wait_s, log):
    """no_set_device.py on 2 ranks under the launcher (``extra`` options, ``env``
    added), until a line says ``verdict`` or ``wait_s`` passed; its output is
    kept in ``log`` under _out(). Returns that line (None if none) and every line."""
    from tests.kernel_hook.output import stop_session, wait_for_line
    proc = subprocess.Popen([sys.executable, "-m", "diag.launcher.main", "--nproc-per-node", "2", "--rdzv-id", rdzv,
                             "--timeline-path", str(tmp_path / "tl"), *extra, os.path.join(SCRIPTS, "no_set_device.py")],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": _pythonpath(), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        line, seen = wait_for_line(proc, lambda ln: verdict in ln, time.time() + wait_s, echo=True)
    finally:
        stop_session(proc)
    with open(os.path.join(_out(tmp_path), log), "w") as f:
        f.write("\n".join(seen))
    return line, seen


def _gpu0_phrase() -> str:
    truth = smi_gpu0()
    return f"gpu {truth['bus']} ({truth['uuid'][:12]}..., nvidia-smi index {truth['index']})"


def test_no_set_device_the_slow_rank_is_named_by_its_gpu_and_the_sharing(tmp_path, hook_built):
    # Issue 34 item 6: two ranks on cuda:0, no set_device, no CUDA collective:
    # only the hook's launches name the GPU. Rank 1's GEMMs are fp32 (planted slow).
    phrase = _gpu0_phrase()
    line, seen = _no_set_device_verdict(
        tmp_path, "nosetdev", {"SLOW_RANK": "1", "RUN_S": "60"},
        ["--perf-window", "15s", "--hook-time-every", "1", "--gpu-sample-interval", "2s"],
        "SLOW: ", 150, "no_set_device_slow.log")
    assert line, "no SLOW verdict"
    assert f"SLOW: rank 1 (node 0, {phrase} shared with rank 0)" in line, line
    assert any(ln.startswith("GPU: ranks 0-1 share one GPU on node 0: " + phrase) for ln in seen), seen[-40:]


def test_no_set_device_a_gpu_kernel_hang_names_the_gpu_and_the_sharing(tmp_path, hook_built):
    # The same set-up; rank 1 launches a kernel that never ends, a GEMM behind it.
    phrase = _gpu0_phrase()
    line, _ = _no_set_device_verdict(
        tmp_path, "nosethang", {"HANG_RANK": "1", "HANG_AFTER_S": "15", "RUN_S": "600"},
        ["--hang-timeout", "30s", "--gpu-sample-interval", "2s"], "HANG: ", 180, "no_set_device_hang.log")
    assert line, "no HANG verdict"
    assert f"rank 1 on {phrase} shared with rank 0" in line, line
