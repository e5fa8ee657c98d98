"""A never-completing collective (fake NCCL) is flagged by the collector's hang
rule through the real xpu_timer_launch, agent and collector, from the hook's
records alone (the Python tracer is off), and both ranks' stacks are dumped."""

import glob
import json
import os
import subprocess
import sys
import time

import pytest

from tests.kernel_hook.conftest import HOOKPROG, ROOT
from tests.kernel_hook.output import stop_session, wait_for_line

HANG_TIMEOUT_S = 3


def _hang_report(timeline, deadline):
    while time.time() < deadline:
        for path in glob.glob(os.path.join(timeline, "*", "*", "hang.json")):
            with open(path) as f:
                report = json.load(f)
            if {"0", "1"} <= set(report.get("dumps", {})):
                return report
        time.sleep(0.2)
    return None


# fence (the default): the launches are a drainer pass apart, so each gets its
# own fence (test_completion.py has the burst case); event: back to back.
@pytest.mark.parametrize("completion,gap_ms", [("fence", 20), ("event", 0)])
def test_never_completing_collective_is_flagged(built, tmp_path, completion, gap_ms):
    timeline = str(tmp_path / "timeline")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XPU_TIMER_", "FAKE_"))}
    env.update(HANG_RANK="0", FAKE_HANG="ncclAllReduce:2", XPU_TIMER_TRACER_DISABLE="1",
               HANG_GAP_MS=str(gap_ms), PYTHONPATH=ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "diag.launcher.main", "--nproc-per-node", "2", "--hang-timeout",
         f"{HANG_TIMEOUT_S}s", "--timeline-path", timeline, "--hook-completion", completion,
         "--no-python", HOOKPROG, "hang", "120"],
        cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        line, seen = wait_for_line(proc, lambda l: "HANG: " in l, time.time() + 90)
        assert line, "no HANG verdict; launcher output:\n" + "\n".join(seen[-40:])
        verdict = line[line.index("HANG: "):]
        assert verdict.startswith("HANG: rank 0 in ncclAllReduce (group ")
        assert "seq 2)" in verdict and "rank 1 not in any collective" in verdict
        report = _hang_report(timeline, time.time() + 60)
        assert report, "the stacks of both ranks were not dumped"
        [rank0] = [r for r in report["ranks"] if r["rank"] == 0]
        assert (rank0["op"], rank0["kind"], rank0["seq"]) == ("ncclAllReduce", "collective", 2)
        assert rank0["in_flight_s"] >= HANG_TIMEOUT_S and report["hung_ranks"] == [0]
    finally:
        stop_session(proc)
