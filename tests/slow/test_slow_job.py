"""SLOW verdicts end to end with real parts: 4-rank gloo jobs under the real
xpu_timer_launch, agent and collector. Both jobs run at once (each test's
wall time is the longer job's): a healthy one with a checkpoint, and one in
which rank 2 sets the pace in two episodes."""

import glob
import json
import os

import pytest

from tests.functional.launch import SCRIPTS, Launch

TRAIN = os.path.join(SCRIPTS, "slow_train.py")
WINDOW = "10s"


def _launch(tmp, job, env):
    return Launch(["--nproc-per-node", "4", "--rdzv-id", job, "--timeline-path", str(tmp),
                   "--perf-window", WINDOW, "--no-hook", TRAIN], env=env)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slow")
    # rank 2 sleeps 40 ms a step for 30 s, recovers for 30 s, then is slow again
    slow = _launch(tmp, "straggler", {"SLOW_RANK": "2", "SLOW_MS": "40", "SLOW_PHASES": "0-30,60-95",
                                      "RUN_S": "95"})
    # healthy for 2 min: every rank pauses 20 s at 40 s (a checkpoint), rank 0 writes 6 s more
    healthy = _launch(tmp, "healthy", {"PAUSE_AT": "40", "PAUSE_S": "20", "SOLO_S": "6", "RUN_S": "120"})
    try:
        codes = (slow.wait(300), healthy.wait(300))
        yield {"tmp": tmp, "slow": slow, "healthy": healthy, "codes": codes}
    finally:
        slow.kill()
        healthy.kill()


def test_the_straggler_is_named_once_per_episode(jobs):
    slow = jobs["slow"]
    assert jobs["codes"][0] == 0, slow.output()
    lines = slow.matching(r"SLOW: ")
    assert len(lines) == 2, slow.output()
    for line in lines:
        assert "SLOW: rank 2 (node 0, gpu 2) is the straggler: its peers wait" in line, line
        assert "rank 0 " not in line and "rank 1 " not in line and "rank 3 " not in line
    docs = [json.load(open(p)) for p in sorted(glob.glob(str(jobs["tmp"] / "straggler" / "*" / "slow.json")))]
    assert [(d["rule"], d["ranks"]) for d in docs] == [("straggler", [2]), ("straggler", [2])]
    peers = [c["wait_share"] for r in docs[0]["per_rank"] if r["rank"] != 2 for c in r["comms"]]
    mine = [c["wait_share"] for r in docs[0]["per_rank"] if r["rank"] == 2 for c in r["comms"]]
    assert min(peers) > 2 * max(mine), docs[0]["per_rank"]
    assert slow.matching(r"slow: ranks 2 recovered \(straggler\)"), slow.output()


def test_a_healthy_job_with_a_checkpoint_stays_quiet(jobs):
    healthy = jobs["healthy"]
    assert jobs["codes"][1] == 0, healthy.output()
    assert healthy.matching(r"SLOW: |HANG: ") == [], healthy.output()
    assert not glob.glob(str(jobs["tmp"] / "healthy" / "*" / "slow.json"))
