"""A job that crashes is explained (issue 41, item 3): the closing summary's
FAILED line and failure.json name the rank that broke it, with the records'
evidence, under the real launcher with 3 gloo ranks and default options.

The three jobs are independent: one module fixture starts them together.
"""

from __future__ import annotations

import glob
import json
import os

import pytest

from diag.common.net import free_port
from tests.functional.launch import SCRIPTS, module_launches  # noqa: F401 (fixture)
from tests.functional.test_closing import stderr_lines

CRASH = os.path.join(SCRIPTS, "crash_skip.py")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def jobs(module_launches, tmp_path_factory):
    started = {}
    for mode in ("two", "one", "healthy"):
        tl = tmp_path_factory.mktemp(mode)
        started[mode] = (module_launches(["--nproc-per-node", "3", "--master-port", str(free_port()),
                                          "--timeline-path", str(tl), "--rdzv-id", mode, CRASH, mode, "10", "40"],
                                         env={"XPU_TIMER_DUMP_TOOLS": "py-spy"}), tl)
    return started


def _failed(job, tl) -> tuple[str, dict]:
    """The FAILED line (the one before the exit line) and failure.json."""
    err = stderr_lines(job)
    assert err[-1] == "xpu-diag: exit 1 (the job's own failure, torchrun's summary above)", job.output()
    assert err[-2].startswith("xpu-diag: FAILED: "), job.output()
    assert sum(1 for line in err if line.startswith("xpu-diag: FAILED: ")) == 1, job.output()
    docs = glob.glob(os.path.join(str(tl), "*", "*", "failure.json"))
    assert len(docs) == 1, docs
    with open(docs[0]) as f:
        doc = json.load(f)
    assert doc["verdict"] == err[-2][len("xpu-diag: "):]
    assert err[-2].endswith(f"in {os.path.dirname(docs[0])}/"), err[-2]
    return err[-2], doc


def test_a_size_mismatch_names_rank_1_and_the_divergence(jobs):
    job, tl = jobs["two"]
    assert job.wait(90) == 1, job.output()
    line, doc = _failed(job, tl)
    # rank 1 skipped the 172 B all-reduce at step 10 (seq 19) and ran the 8 B one there: gloo aborts
    assert "rank 1 failed first (killed by SIGABRT)" in line, line
    assert ('the ranks diverged on group "default" (ranks 0-2) at seq 19: ranks 0,2 all_reduce 172 B (float32, sum), '
            'rank 1 all_reduce 8 B (float32, sum)') in line, line
    assert "culprit rank(s) 1;" in line, line
    assert doc["culprits"] == [1] and doc["first_failed"]["rank"] == 1 and doc["first_failed"]["signal"] == 6
    ev = doc["evidence"]
    assert ev["kind"] == "diverged" and ev["seq"] == 19 and ev["comm_id"] == 0, ev
    assert {v["op"]: v["ranks"] for v in ev["variants"]} == {"all_reduce 172 B (float32, sum)": [0, 2],
                                                            "all_reduce 8 B (float32, sum)": [1]}, ev


def test_a_rank_that_left_one_op_short_is_blamed_over_torchruns_root_cause(jobs):
    job, tl = jobs["one"]
    assert job.wait(90) == 1, job.output()
    line, doc = _failed(job, tl)
    assert "rank 1 left first (exit 0)" in line, line
    assert ('rank 1 left after 39 ops on group "default" (ranks 0-2) while ranks 0,2 were in their 40th '
            '(all_reduce 1 KiB (float32, sum))') in line, line
    assert "culprit rank(s) 1;" in line, line
    ev = doc["evidence"]
    assert (ev["kind"], ev["left"], ev["left_after"], ev["peers"]) == ("left_early", [1], 39, [0, 2]), ev
    assert doc["first_failed"] == dict(doc["first_failed"], rank=1, exit_code=0, signal=0)
    # torchrun names rank 0 or 2 (whose gloo error came first within its second); the records blame rank 1
    root = doc["torchrun_root_cause"]
    assert root["rank"] in (0, 2) and not root["agrees"], root
    assert f"torchrun's Root Cause names rank {root['rank']}" in line and "the records blame rank 1" in line, line
    # the exception's last line, from torchrun's error file (the bootstrap writes it)
    errors = [e["error"] for e in doc["exits"] if e["exit_code"] == 1]
    assert errors and all(e.startswith("RuntimeError: ") for e in errors), doc["exits"]
    assert doc["alive_at_failure"] in ([], [0, 2], [0], [2]), doc


def test_a_healthy_job_prints_no_failed_line(jobs):
    job, tl = jobs["healthy"]
    assert job.wait(90) == 0, job.output()
    assert stderr_lines(job)[-2:] == ["xpu-diag: no hang or slow rank seen", "xpu-diag: exit 0 (the job succeeded)"], \
        job.output()
    assert not job.matching(r"FAILED"), job.output()
    assert not glob.glob(os.path.join(str(tl), "*", "*", "failure.json"))
