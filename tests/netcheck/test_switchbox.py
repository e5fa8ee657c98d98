"""Switchbox pairs, NVML health and verdicts, replayed from NVML recordings.

The fixtures named nvml_synthetic_* are hand-built (make_synthetic_nvml.py);
recordings from real machines (nvml_record) are picked up by name too.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from diag.netcheck.api import FAIL, PASS, RULE_ABSOLUTE, RULE_CHANNELS, NetcheckError
from diag.netcheck.config import parse_args
from diag.netcheck.health import link_health
from diag.netcheck.nvml import NvmlQueryError, RecordingNvml, ReplayNvml, key
from diag.netcheck.switchbox import BoxFigures, judge_box, plan_box
from diag.netcheck.topology import bus_id

FIX = Path(__file__).parent / "fixtures"
HEALTHY = FIX / "nvml_synthetic_h200x4_healthy.json"
FAULTY = FIX / "nvml_synthetic_h200x4_faulty.json"
RECORDED = sorted(p for p in FIX.glob("nvml_*.json") if "synthetic" not in p.name)
REPO = Path(__file__).resolve().parents[2]


def _replay_with(tmp_path, base, edit):
    doc = json.loads(base.read_text())
    edit(doc["answers"])
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    return ReplayNvml(str(path))


def cfg(*argv):
    return parse_args(["--switchbox-check", *argv], env={})


def test_discovers_nvlink_pairs_and_switch_groups():
    plan = plan_box(ReplayNvml(str(HEALTHY)), None)
    assert [(p.a, p.b, p.kind) for p in plan.pairs] == [(0, 1, "nvlink"), (2, 3, "nvlink")]
    assert plan.groups == [[0, 1], [2, 3]]
    assert [g.bus_id for g in plan.gpus][0] == "0000:19:00.0"


def test_without_nvlink_pairs_follow_the_pcie_switches(tmp_path):
    def no_nvlink(a):
        for k in [k for k in a if k.startswith("nvmlDeviceGetP2PStatus")]:
            a[k] = {"error": 3, "message": "Not Supported"}
    plan = plan_box(_replay_with(tmp_path, HEALTHY, no_nvlink), None)
    assert [(p.a, p.b, p.kind) for p in plan.pairs] == [(0, 1, "pcie-switch"), (2, 3, "pcie-switch")]


def test_no_links_at_all_falls_back_and_says_so(tmp_path):
    def flat(a):
        for k in list(a):
            if k.startswith(("nvmlDeviceGetP2PStatus", "nvmlDeviceGetTopologyCommonAncestor")):
                a[k] = {"value": 50}
    plan = plan_box(_replay_with(tmp_path, HEALTHY, flat), None)
    assert [p.kind for p in plan.pairs] == ["fallback", "fallback"] and "paired neighbours" in plan.note
    assert plan.groups == []


def test_given_box_pairs_are_used_and_checked():
    nvml = ReplayNvml(str(HEALTHY))
    assert [p.label() for p in plan_box(nvml, [(0, 2), (1, 3)]).pairs] == ["0:2", "1:3"]
    with pytest.raises(NetcheckError, match=r"^--box-pairs: 0:7 name GPUs this host does not have \(it has 4\)"):
        plan_box(nvml, [(0, 7)])


def test_healthy_host_has_no_failing_findings():
    nvml = ReplayNvml(str(HEALTHY))
    findings = link_health(nvml, plan_box(nvml, None).gpus)
    assert [f for f in findings if f.severity != "info"] == []


def test_faulty_host_findings_have_reason_codes():
    nvml = ReplayNvml(str(FAULTY))
    found = {(f.gpu, f.code, f.severity) for f in link_health(nvml, plan_box(nvml, None).gpus, under_load=True)}
    assert found == {(0, "ECC_UNCORRECTED", "fail"), (1, "PCIE_REPLAYS", "warn"),
                     (2, "PCIE_WIDTH_DOWNGRADED", "fail"), (3, "NVLINK_DOWN", "fail"), (3, "XID", "fail")}


def test_idle_generation_drop_only_warns_but_under_load_fails(tmp_path):
    def gen3(a):
        a[key("nvmlDeviceGetCurrPcieLinkGeneration", (1,))] = {"value": 3}
    nvml = _replay_with(tmp_path, HEALTHY, gen3)
    gpus = plan_box(nvml, None).gpus
    idle = [f for f in link_health(nvml, gpus, under_load=False) if f.code == "PCIE_GEN_DOWNGRADED"]
    busy = [f for f in link_health(nvml, gpus, under_load=True) if f.code == "PCIE_GEN_DOWNGRADED"]
    assert [(f.gpu, f.severity) for f in idle] == [(1, "warn")] and "read at idle" in idle[0].message
    assert [(f.gpu, f.severity) for f in busy] == [(1, "fail")]


def _figures(peer=30000.0, host=None, group=None):
    figs = BoxFigures()
    for a, b in ((0, 1), (1, 0), (2, 3), (3, 2)):
        figs.peer[(a, b)] = peer
    figs.host = host or {g: {"h2d": 25000.0, "d2h": 24000.0} for g in range(4)}
    figs.group = group or {(0, 1): {"h2d": 40000.0, "d2h": 39000.0}, (2, 3): {"h2d": 41000.0, "d2h": 39500.0}}
    return figs


def test_healthy_figures_pass_and_channels_are_directed():
    plan = plan_box(ReplayNvml(str(HEALTHY)), None)
    records, reason = judge_box("boxA", plan, _figures(), [], cfg())
    assert reason is None
    channels = [r for r in records if r.metric == "channels"][0]
    assert channels.value == 4 and channels.verdict == PASS
    assert {r.link for r in records if r.metric == "peer_copy"} == {"gpu0->gpu1", "gpu1->gpu0", "gpu2->gpu3",
                                                                   "gpu3->gpu2"}


def test_min_bandwidth_above_the_real_figure_fails_on_channels():
    plan = plan_box(ReplayNvml(str(HEALTHY)), None)
    records, reason = judge_box("boxA", plan, _figures(peer=30000.0), [], cfg("--min-bandwidth", "50000"))
    assert reason and "0 working channel(s) < --min-channels 2" in reason
    assert [r.rule for r in records if r.metric == "channels"] == [RULE_CHANNELS]
    assert all(r.verdict == FAIL and r.rule == RULE_ABSOLUTE for r in records if r.metric == "peer_copy")


def test_one_slow_direction_still_leaves_enough_channels():
    plan = plan_box(ReplayNvml(str(HEALTHY)), None)
    figs = _figures()
    figs.peer[(2, 3)] = 3000.0
    records, reason = judge_box("boxA", plan, figs, [], cfg())
    assert reason is None
    assert [r.link for r in records if r.verdict == FAIL] == ["gpu2->gpu3"]
    _, reason = judge_box("boxA", plan, figs, [], cfg("--min-channels", "4"))
    assert "3 working channel(s) < --min-channels 4" in reason


def test_degraded_switch_uplink_is_found_by_the_all_at_once_copy():
    plan = plan_box(ReplayNvml(str(HEALTHY)), None)
    figs = _figures(group={(0, 1): {"h2d": 40000.0, "d2h": 39000.0}, (2, 3): {"h2d": 12000.0, "d2h": 11000.0}})
    records, reason = judge_box("boxA", plan, figs, [], cfg())
    bad = [r for r in records if r.verdict == FAIL]
    assert {r.link for r in bad} == {"switch[gpu2,gpu3]"} and all(r.rule == "relative-ratio" for r in bad)
    assert "switch uplink" in reason


def test_replay_unknown_query_and_bad_file(tmp_path):
    nvml = ReplayNvml(str(HEALTHY))
    with pytest.raises(NvmlQueryError):
        nvml.query("nvmlDeviceGetPowerUsage", 0)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(NetcheckError, match="is not an NVML recording"):
        ReplayNvml(str(bad))


def test_recorder_captures_every_answer_the_check_uses(tmp_path):
    """Record through RecordingNvml (over a replay standing in for the driver), replay the recording."""
    rec = RecordingNvml(ReplayNvml(str(FAULTY)))
    plan = plan_box(rec, None)
    first = link_health(rec, plan.gpus, under_load=True)
    path = tmp_path / "rec.json"
    path.write_text(json.dumps({"version": 1, "source": "test", "answers": rec.answers}))
    again = ReplayNvml(str(path))
    assert [p.label() for p in plan_box(again, None).pairs] == [p.label() for p in plan.pairs]
    assert link_health(again, plan.gpus, under_load=True) == first


@pytest.mark.parametrize("fixture", RECORDED, ids=[p.name for p in RECORDED])
def test_recorded_machines_parse(fixture):
    nvml = ReplayNvml(str(fixture))
    plan = plan_box(nvml, None)
    assert plan.gpus and (len(plan.gpus) < 2 or plan.pairs)
    link_health(nvml, plan.gpus)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "diag.netcheck.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_cli_switchbox_replay_end_to_end(tmp_path):
    out = tmp_path / "faults.json"
    res = _cli("--switchbox-check", "--nvml-replay", str(FAULTY), "--node-name", "boxA", "--output", str(out),
               "--format", "slurm", "--no-progress")
    assert res.returncode == 1, res.stderr
    assert res.stdout.strip() == "boxA"
    assert "switchbox pairs (discovered from NVML topology): 0:1(nvlink) 2:3(nvlink)" in res.stderr
    doc = json.loads(out.read_text())
    assert doc["switchbox"]["pairs"] == ["0:1", "2:3"] and "SYNTHETIC" in doc["switchbox"]["nvml_source"]
    res = _cli("preflight", "--nvml-replay", str(HEALTHY), "--node-name", "boxA", "--no-progress")
    assert res.returncode == 0, res.stderr


def test_bus_id_normalisation():
    assert bus_id("00000000:1b:00.0") == bus_id("0000:1B:00.0") == "0000:1B:00.0"
    assert bus_id(None) == ""
