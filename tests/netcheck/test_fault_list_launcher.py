"""netcheck's fault list through the real xpu_timer_launch: faulty refuses (75), healthy starts."""

import json
import os
from pathlib import Path

import pytest

from diag import faultlist
from tests import preloaded

REPO = Path(__file__).resolve().parents[2]
FAULTY_BOX = Path(__file__).parent / "fixtures" / "nvml_synthetic_h200x4_faulty.json"
TRAIN = "import pathlib, sys\npathlib.Path(sys.argv[1]).write_text('ran')\n"

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def faults_json(tmp_path_factory):
    """A fault list made by netcheck itself: the switchbox check marks boxA faulty."""
    out = tmp_path_factory.mktemp("netcheck") / "faults.json"
    res = preloaded.run(["-m", "diag.netcheck.cli", "--switchbox-check", "--nvml-replay", str(FAULTY_BOX),
                         "--node-name", "boxA", "--output", str(out), "--no-progress"], REPO, timeout=120)
    assert res.returncode == 1, res.stderr
    return out


def launch(tmp_path, fault_list, node_name, *extra):
    marker = tmp_path / "marker"
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = dict(os.environ, XPU_TIMER_NODE_NAME=node_name)
    for k in ("XPU_TIMER_FAULT_LIST", "XPU_TIMER_FAULT_LIST_MAX_AGE"):
        env.pop(k, None)
    # the launcher forked with torch imported (tests/preloaded.py), as every launch of the tests
    cmd = ["-m", "diag.launcher.main", "--fault-list", str(fault_list), *extra,
           "--no-hook", "--timeline-path", str(tmp_path / "tl"), "--nnodes", "1", "--nproc-per-node", "1",
           str(script), str(marker)]
    res = preloaded.run(cmd, REPO, env, timeout=180)
    return res, marker


def test_faulty_node_refuses_to_start_with_one_line(tmp_path, faults_json):
    res, marker = launch(tmp_path, faults_json, "boxA")
    assert res.returncode == faultlist.EXIT_FAULTY_NODE == 75
    # torch prints a NumPy warning at import where numpy is absent (not ours, not the launcher's words)
    lines = [l for l in res.stderr.strip().splitlines()
             if "Failed to initialize NumPy" not in l and "_conversion_method_template" not in l]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"xpu_timer_launch: node boxA is marked faulty in {faults_json} "
                               "(matched by XPU_TIMER_NODE_NAME): ")
    assert "ECC_UNCORRECTED" in lines[0]
    assert not marker.exists()


def test_healthy_node_starts(tmp_path, faults_json):
    res, marker = launch(tmp_path, faults_json, "boxB")
    assert res.returncode == 0, res.stderr
    assert marker.read_text() == "ran"
    assert "marked faulty" not in res.stderr


def test_old_fault_list_warns_and_starts(tmp_path, faults_json):
    doc = json.loads(faults_json.read_text())
    old = tmp_path / "old.json"
    faultlist.write(old, {f["node"]: f["reason"] for f in doc["faulty"]}, doc["records"],
                    created_unix=doc["created_unix"] - 3 * 86400)
    res, marker = launch(tmp_path, old, "boxB", "--fault-list-max-age", "24h")
    assert res.returncode == 0, res.stderr
    assert marker.read_text() == "ran"
    assert "warning: fault list" in res.stderr and "72.0 h old" in res.stderr
