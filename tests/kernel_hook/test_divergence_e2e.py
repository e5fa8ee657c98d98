"""Divergence and lanes end to end with the fake NCCL (asynchronous launch; a
mismatched collective that never completes), through the real
xpu_timer_launch, agent and collector, from the hook's records alone: what
gloo cannot show (it raises on a mismatch instead of hanging). The three jobs
are independent and mostly wait, so they run side by side."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.kernel_hook.conftest import HOOKPROG, ROOT
from tests.kernel_hook.output import stop_session, wait_for_line

HANG_TIMEOUT_S = 3
GAP = "z:20"   # a drainer pass apart: each op gets its own fence


def _script(*ops):
    return ",".join(op for pair in zip(ops, [GAP] * len(ops)) for op in pair)


def _start(tmp_path, env_extra, nproc=2):
    """The launcher over hookprog's scripted ranks; -> (process, timeline directory)."""
    timeline = str(tmp_path / "timeline")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XPU_TIMER_", "FAKE_", "OPS_", "HANG_"))}
    env.update(XPU_TIMER_TRACER_DISABLE="1", PYTHONPATH=ROOT, **env_extra)
    proc = subprocess.Popen(
        [sys.executable, "-m", "diag.launcher.main", "--nproc-per-node", str(nproc), "--hang-timeout",
         f"{HANG_TIMEOUT_S}s", "--timeline-path", timeline, "--no-python", HOOKPROG, "script", "120"],
        cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, timeline


def _verdict(proc, timeline):
    """The HANG line and hang.json of a job _start started."""
    line, seen = wait_for_line(proc, lambda l: "HANG: " in l, time.time() + 90)
    assert line, "no HANG verdict; launcher output:\n" + "\n".join(seen[-40:])
    deadline = time.time() + 30
    while time.time() < deadline and not glob.glob(os.path.join(timeline, "*", "*", "hang.json")):
        time.sleep(0.2)
    [path] = glob.glob(os.path.join(timeline, "*", "*", "hang.json"))
    with open(path) as f:
        return line[line.index("HANG: "):], json.load(f)


BUCKET, LOSS = "ar:1024:9:0", "ar:1:7:0"
SENDS = ["send:64:7:1"] * 5
AR, AG = "ar:256:7:0", "ag:64:7"
# name -> (env, ranks): the three jobs, independent, all waiting on their hang timeout
JOBS = {
    # Rank 1 skips the loss all_reduce and runs into the next step's buckets.
    "ran_ahead": ({"OPS_R0": _script(BUCKET, BUCKET, LOSS), "HANG_R0": "ncclAllReduce:3",
                   "OPS_R1": _script(BUCKET, BUCKET, BUCKET, BUCKET, BUCKET), "HANG_R1": "ncclAllReduce:3"}, 2),
    # Stage 0: all_reduce seq 2 hangs while its sends (p2p seq 1..5, from the
    # stage's p2p thread, on their own stream) complete.
    "pipeline": ({"OPS_R0": _script("ar:256:7:0", "ar:256:7:0", "t", *SENDS), "HANG_R0": "ncclAllReduce:2",
                  "OPS_R1": _script("ar:256:7:0", *(["recv:64:7:0"] * 5))}, 2),
    # Ranks 0 and 1 all_reduce at seq 2; rank 2 all_gathers there: each hangs in its own.
    "minority": ({"OPS_R0": _script(AR, AR), "HANG_R0": "ncclAllReduce:2",
                  "OPS_R1": _script(AR, AR), "HANG_R1": "ncclAllReduce:2",
                  "OPS_R2": _script(AR, AG), "HANG_R2": "ncclAllGather:1"}, 3),
}


@pytest.fixture(scope="module")
def jobs(built, tmp_path_factory):
    """The three jobs started together (most of each is its hang timeout and
    the report); name -> (process, timeline). Each test judges its own."""
    started = {}
    try:
        for name, (env, nproc) in JOBS.items():
            started[name] = _start(tmp_path_factory.mktemp(name), env, nproc)
        yield started
    finally:
        for proc, _ in started.values():   # all told at once: each launcher takes seconds to stop
            os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in started.values():
            stop_session(proc)


def test_a_rank_that_skipped_a_collective_and_ran_ahead_is_named(jobs):
    verdict, report = _verdict(*jobs["ran_ahead"])
    # Both ranks' oldest op in flight is seq 3; rank 1's may start a tick or
    # more after rank 0's (its launcher's ranks start apart on a loaded host),
    # so at the verdict it may not have waited the timeout yet: then rank 0
    # alone is hung, and rank 1 is still the one that ran ahead.
    assert verdict.startswith(("HANG: ranks 0-1 in ncclAllReduce (group ",
                               "HANG: rank 0 in ncclAllReduce (group ")), verdict
    assert ("the ranks diverged at seq 3: rank 0 all_reduce 4 B (float32, sum), "
            "rank 1 all_reduce 2 KiB (bfloat16, sum) (1 against 1: ") in verdict
    assert "rank 1 ran 2 ops ahead (at seq 5)" in verdict
    assert report["culprits"] == [1]
    [group] = report["mismatch"]["groups"]
    assert (group["diverged_seq"], group["stuck_seq"], group["members"]) == (3, 3, "0-1")
    assert report["mismatch"]["summary"] in verdict


def test_pipeline_sends_never_hide_a_hung_all_reduce(jobs):
    verdict, report = _verdict(*jobs["pipeline"])
    assert verdict.startswith("HANG: rank 0 in ncclAllReduce (group "), verdict
    assert "seq 2)" in verdict and "rank 1 not in any collective (at seq 1 on group " in verdict
    assert report["culprits"] == [1]
    [rank0] = [r for r in report["ranks"] if r["rank"] == 0]
    assert (rank0["op"], rank0["seq"], rank0["last_started_seq"]) == ("ncclAllReduce", 2, 2)


def test_a_different_collective_at_the_same_seq_names_the_minority(jobs):
    verdict, report = _verdict(*jobs["minority"])
    assert ("the ranks diverged at seq 2: ranks 0-1 all_reduce 1 KiB (float32, sum), "
            "rank 2 all_gather 768 B (float32)") in verdict, verdict
    assert report["culprits"] == [2] and report["mismatch"]["groups"][0]["minority"] == [2]
