import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diag import faultlist
from diag.faultlist import EXIT_FAULTY_NODE, FaultListError

REPO = Path(__file__).resolve().parents[2]


def _write_raw(tmp_path, doc):
    path = tmp_path / "faults.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_exit_code_is_fixed():
    assert EXIT_FAULTY_NODE == 75


def test_write_then_load_round_trip(tmp_path):
    path = tmp_path / "faults.json"
    rec = {"node": "n3", "gpu": None, "link": "n3<->n1", "metric": "busbw", "value": 1.5,
           "unit": "GB/s", "expected": 20.0, "threshold": 10.0, "verdict": "fail",
           "reason": "busbw 1.5 GB/s < 10 GB/s", "rule": "absolute"}
    faultlist.write(path, {"n3": "slow link", "n7": "timeout"}, [rec], created_unix=1000.0)
    loaded = faultlist.load(path)
    assert loaded.created_unix == 1000.0
    assert loaded.faulty == {"n3": "slow link", "n7": "timeout"}
    assert loaded.records == [rec]
    assert loaded.path == str(path)
    assert [p.name for p in tmp_path.iterdir()] == ["faults.json"]  # no temp file left


def test_reason_for_exact_and_short_names(tmp_path):
    fl = faultlist.parse(json.dumps({"version": 1, "created_unix": 1.0, "faulty": [
        {"node": "gpu-a3.cluster.local", "reason": "busbw low"}, {"node": "b7", "reason": "hung"}]}))
    assert fl.reason_for(["gpu-a3"]) == "busbw low"
    assert fl.reason_for(["x", "gpu-a3.cluster.local"]) == "busbw low"
    assert fl.reason_for(["b7.cluster.local"]) == "hung"
    assert fl.reason_for(["b7"]) == "hung"
    assert fl.reason_for(["gpu-a4", "gpu-a4.cluster.local"]) is None
    assert fl.reason_for([]) is None
    assert fl.reason_for([""]) is None


def test_age(tmp_path):
    fl = faultlist.parse(json.dumps({"version": 1, "created_unix": 100.0, "faulty": []}))
    assert fl.age_s(now=250.0) == 150.0


@pytest.mark.parametrize("doc, fragment", [
    ("{not json", "not JSON"),
    ("[]", "not a fault list"),
    ({"version": 2, "created_unix": 1.0, "faulty": []}, "version 2 is not supported"),
    ({"created_unix": 1.0, "faulty": []}, "version None is not supported"),
    ({"version": 1, "faulty": []}, "created_unix"),
    ({"version": 1, "created_unix": "yesterday", "faulty": []}, "created_unix"),
    ({"version": 1, "created_unix": 1.0, "faulty": {"n1": "x"}}, "'faulty' must be a list"),
    ({"version": 1, "created_unix": 1.0, "faulty": [{"reason": "x"}]}, "faulty[0] has no node"),
    ({"version": 1, "created_unix": 1.0, "faulty": [], "records": {}}, "'records' must be a list"),
    ('{"version": 1, "created_unix": NaN, "faulty": []}', "'created_unix' is nan, not a time"),
    ('{"version": 1, "created_unix": Infinity, "faulty": []}', "'created_unix' is inf, not a time"),
    ('{"version": 1, "created_unix": -Infinity, "faulty": []}', "'created_unix' is -inf, not a time"),
])
def test_bad_files_give_one_line_naming_the_file(tmp_path, doc, fragment):
    path = _write_raw(tmp_path, doc)
    with pytest.raises(FaultListError) as info:
        faultlist.load(path)
    msg = str(info.value)
    assert msg.startswith(f"fault list {path}: ")
    assert fragment in msg
    assert "\n" not in msg


def test_missing_file(tmp_path):
    with pytest.raises(FaultListError, match="cannot read it"):
        faultlist.load(tmp_path / "nope.json")


def test_missing_reason_gets_a_default(tmp_path):
    fl = faultlist.load(_write_raw(tmp_path, {"version": 1, "created_unix": 1, "faulty": [{"node": "n1"}]}))
    assert fl.faulty == {"n1": "marked faulty"}


def test_failed_write_keeps_old_file(tmp_path):
    path = tmp_path / "faults.json"
    faultlist.write(path, {"n1": "old"}, [], created_unix=1.0)
    with pytest.raises(TypeError):
        faultlist.write(path, {"n2": "new"}, [{"value": object()}])  # not JSON-serialisable
    assert faultlist.load(path).faulty == {"n1": "old"}
    assert sorted(os.listdir(tmp_path)) == ["faults.json"]


HOSTILE = "\x1b[2J\x1b[H\x1b[32mall good\x1b[0m\r\n" + "A" * 1_000_000   # clear screen, a fake verdict, 1 MB


def test_a_read_list_escapes_control_characters_and_cuts_reasons_to_one_line(tmp_path):
    path = _write_raw(tmp_path, {"version": 1, "created_unix": 1.0, "faulty": [
        {"node": "n1\x07\u202e", "reason": HOSTILE, "hostname": "h\x1b]0;x\x07", "addr": "10.0.0.1\n"}]})
    fl = faultlist.load(path)
    (e,) = fl.entries
    assert e.reason.startswith("\\x1b[2J\\x1b[H\\x1b[32mall good\\x1b[0m\\r\\nAAA")
    assert len(e.reason) == faultlist.REASON_MAX and e.reason.endswith("…")
    assert (e.node, e.hostname, e.addr) == ("n1\\x07\\u202e", "h\\x1b]0;x\\x07", "10.0.0.1\\n")
    assert fl.faulty == {e.node: e.reason}
    for text in (e.reason, e.node, e.hostname, e.addr):
        assert text.isprintable(), text
    assert json.loads(path.read_text())["faulty"][0]["reason"] == HOSTILE   # the evidence stays whole


def test_printable_is_idempotent_and_keeps_plain_text():
    plain = "node3: [relative-ratio] all_reduce busbw 0.003 GB/s < 0.2 x fleet median 0.41 GB/s"
    assert faultlist.printable(plain) == plain
    once = faultlist.printable(HOSTILE)
    assert faultlist.printable(once) == once


@pytest.mark.parametrize("created, stale", [
    (1000.0 + 60.0, None),                   # a minute ahead: clocks differ
    (1000.0, None),
    (1000.0 - 2 * 3600, "is 2.0 h old"),
])
def test_a_list_is_stale_past_its_max_age(created, stale):
    fl = faultlist.parse(json.dumps({"version": 1, "created_unix": created, "faulty": []}), now=1000.0)
    got = fl.stale(3600.0, now=1000.0)
    assert (got is None) if stale is None else (stale in got), got


@pytest.mark.parametrize("created, ahead", [
    (1e18, "2.78e+14 h"),                    # would never go stale
    (1000.0 + 3 * 3600, "3 h"),              # beyond any clock skew
    (1000.0 + faultlist.CLOCK_SKEW_S + 1, "0.0836 h"),
])
def test_a_list_dated_in_the_future_is_refused_like_nan(created, ahead):
    with pytest.raises(faultlist.FaultListError) as err:
        faultlist.parse(json.dumps({"version": 1, "created_unix": created, "faulty": []}), "f.json", now=1000.0)
    assert str(err.value).startswith(f"fault list f.json: 'created_unix' {created:g} is {ahead} in the future "
                                     f"(more than the 300 s of clock skew allowed); ")


def test_preflight_prints_a_listed_reason_escaped_and_cut(tmp_path):
    path = _write_raw(tmp_path, {"version": 1, "created_unix": 1.0, "faulty": [{"node": "boxA", "reason": HOSTILE}]})
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPU_TIMER_")}
    res = subprocess.run([sys.executable, "-m", "diag.netcheck.cli", "preflight", "--fault-list", str(path),
                          "--node-name", "boxA", "--no-progress"], cwd=REPO, env=env, capture_output=True,
                         timeout=120)
    assert res.returncode == 1, res.stderr
    assert b"\x1b" not in res.stderr and b"\r" not in res.stderr
    lines = [l for l in res.stderr.decode().splitlines() if l.startswith("netcheck preflight: ")]
    assert len(lines) == 1 and "\\x1b[2J" in lines[0] and len(lines[0]) < 400, res.stderr[:500]
