"""Switchbox check on real GPUs (H200 x2 / x4): discovered pairs, and a forced failure.

Run (lead, on the GPU machine):  python -m pytest -q tests/gpu/test_netcheck_switchbox.py
Set NETCHECK_GPU_OUT=DIR to keep each run's fault list and output for docs/netcheck.md.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.gpus(2), pytest.mark.timeout(900)]


def run_netcheck(tmp_path, name, *args):
    out = tmp_path / f"{name}.json"
    res = subprocess.run([sys.executable, "-m", "diag.netcheck.cli", "--switchbox-check", "--no-progress",
                          "--output", str(out), *args], cwd=REPO, capture_output=True, text=True, timeout=800)
    keep = os.environ.get("NETCHECK_GPU_OUT")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{name}.txt").write_text(f"$ netcheck --switchbox-check {' '.join(args)}\n"
                                                f"exit {res.returncode}\n{res.stdout}\n{res.stderr}")
        if out.exists():
            shutil.copy(out, Path(keep) / f"{name}.json")
    return res, (json.loads(out.read_text()) if out.exists() else None)


@pytest.fixture(scope="module")
def discovered(tmp_path_factory):
    return run_netcheck(tmp_path_factory.mktemp("sb"), "switchbox_discovered")


def test_discovered_pairs_are_printed_and_measured(discovered):
    res, doc = discovered
    assert doc is not None, res.stderr
    assert "switchbox pairs (" in res.stderr
    pairs = doc["switchbox"]["pairs"]
    assert pairs, res.stderr
    peer = [r for r in doc["records"] if r["metric"] == "peer_copy"]
    assert len(peer) == 2 * len(pairs) and all(r["value"] > 0 for r in peer)
    host = [r for r in doc["records"] if r["metric"].startswith("host_copy.")]
    assert host and all(r["value"] > 0 for r in host)
    assert res.returncode == 0, f"this machine failed its own switchbox check:\n{res.stdout}\n{res.stderr}"


def test_min_bandwidth_above_the_real_figure_fails(discovered, tmp_path):
    _, doc = discovered
    best = max(r["value"] for r in doc["records"] if r["metric"] == "peer_copy")
    res, failed = run_netcheck(tmp_path, "switchbox_forced_failure", "--min-bandwidth", f"{best * 2:.0f}")
    assert res.returncode == 1, res.stderr
    channels = [r for r in failed["records"] if r["metric"] == "channels"][0]
    assert channels["verdict"] == "fail" and channels["rule"] == "channels" and channels["value"] == 0
    assert "--min-channels" in failed["faulty"][0]["reason"]
