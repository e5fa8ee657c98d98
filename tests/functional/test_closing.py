"""The launcher's last word (issue 34, items 4-5): one closing summary after
torchrun's block, with the events, culprits and stacks, and an exit status
that tells a hang xpu-diag stopped from the job's own failure.

The three jobs are independent and mostly wait (a hang timeout, the dumps),
so one module fixture starts them together; each test judges its own. The
subject is the launcher's summary, not torch: their ranks are torch-free
(scripts/torchless.py), the same records through the same writer.
"""

from __future__ import annotations

import os

import pytest

from diag.common.net import free_port
from tests.functional.launch import SCRIPTS, module_launches  # noqa: F401 (fixture)

STALL = os.path.join(SCRIPTS, "torchless_stall.py")   # rank 2 stalls at step 3
FAST = {"XPU_TIMER_DUMP_TOOLS": "py-spy"}
pytestmark = pytest.mark.timeout(120)


def stderr_lines(job) -> list[str]:
    return [line for _, stream, line in job.lines if stream == "err"]


@pytest.fixture(scope="module")
def jobs(module_launches, tmp_path_factory):
    """name -> (job, its timeline directory, its release file), all started at once."""
    started = {}
    tmp_path = tmp_path_factory.mktemp("killed")
    started["killed"] = (module_launches(
        ["--nproc-per-node", "3", "--master-port", str(free_port()), "--hang-timeout", "2s",
         "--hang-action", "kill", "--timeline-path", str(tmp_path), "--rdzv-id", "killed",
         STALL, "600", "8"], env=FAST), tmp_path, None)
    # Rank 2's stall ends once its stacks are in (was: a fixed 6 s for a 2 s
    # --hang-timeout and the dumps, tight on a loaded machine).
    tmp_path = tmp_path_factory.mktemp("reported")
    release = tmp_path / "release"
    started["reported"] = (module_launches(
        ["--nproc-per-node", "3", "--master-port", str(free_port()), "--hang-timeout", "2s",
         "--timeline-path", str(tmp_path), "--rdzv-id", "reported", STALL, "60", "6"],
        env=dict(FAST, STALL_RELEASE=str(release))), tmp_path, release)
    tmp_path = tmp_path_factory.mktemp("healthy")
    started["healthy"] = (module_launches(
        ["--nproc-per-node", "2", "--master-port", str(free_port()), "--hang-timeout", "20s",
         "--timeline-path", str(tmp_path), STALL, "0", "2"]), tmp_path, None)
    return started


def test_hang_action_kill_exits_3_and_names_the_culprit_after_torchruns_block(jobs):
    job, tmp_path, _ = jobs["killed"]
    assert job.wait(90) == 3, job.output()
    err = stderr_lines(job)
    torchruns = max(i for i, line in enumerate(err) if line.strip().startswith("exitcode  : -9"))
    ours = [line for line in err[torchruns:] if line.startswith("xpu-diag: ")]
    assert ours and err[-1] == ours[-1] == "xpu-diag: exit 3 (stopped by xpu-diag because of a hang)", job.output()
    assert "xpu-diag: 1 hang in this run" in ours, job.output()
    event = next(line for line in ours if line.startswith("xpu-diag: HANG event "))
    assert "rank 2 not in any collective" in event and "culprit rank(s) 2" in event, event
    assert f"stacks in {tmp_path}/killed/" in event, event
    stopped = next(line for line in ours if "stopped by xpu-diag (SIGKILL" in line)
    assert "culprit rank(s) 2" in stopped and "'exitcode -9' above is that kill" in stopped, stopped


def test_a_reported_hang_is_listed_at_the_end_and_the_job_keeps_its_own_status(jobs):
    job, _, release = jobs["reported"]
    assert job.wait_line(r"^STACKS: ", 60), job.output()
    release.touch()
    assert job.wait(90) == 0, job.output()
    assert len(job.matching(r"^DONE rank=")) == 3, job.output()
    err = stderr_lines(job)
    assert err[-3:-1] == ["xpu-diag: 1 hang in this run", err[-2]] and err[-1] == "xpu-diag: exit 0 (the job succeeded)", \
        job.output()
    assert err[-2].startswith("xpu-diag: HANG event ") and "culprit rank(s) 2" in err[-2], job.output()
    # Recovery was never asked for: no LAST WORDS line, no "nothing persisted" line (item 5).
    assert job.wait_line(r"^STACKS: ", 1) is not None, job.output()
    assert not job.matching(r"LAST WORDS|no node held a snapshot|no rank has a snapshot"), job.output()


def test_a_healthy_job_says_so_last(jobs):
    job, _, _ = jobs["healthy"]
    assert job.wait(90) == 0, job.output()
    assert stderr_lines(job)[-2:] == ["xpu-diag: no hang or slow rank seen", "xpu-diag: exit 0 (the job succeeded)"], \
        job.output()
    assert not job.matching(r"NVML"), job.output()   # a CPU job: no NVML is no news (item 5)
