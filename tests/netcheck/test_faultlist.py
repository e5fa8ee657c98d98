import json
import os

import pytest

from diag import faultlist
from diag.faultlist import EXIT_FAULTY_NODE, FaultListError


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
