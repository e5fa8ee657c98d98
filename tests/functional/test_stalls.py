"""Issue 13 items 5 and 7 end to end through the real xpu_timer_launch, the
real collector and py-spy: collectives that DDP issues from C++ (real gloo
workers), and stalls outside any collective (the idle rule: torch-free ranks,
scripts/torchless.py, the same records through the same writer; the idle
rule's real gloo job is tests/functional/test_verdicts.py's)."""

from __future__ import annotations

import json
import os

import pytest

from tests.functional.launch import SCRIPTS, module_launches  # noqa: F401 (fixture)
from tests.waiting import wait_for
from tests.functional.test_launch import _wait_for_stacks, event_dirs, frame_names, launches  # noqa: F401

pytestmark = pytest.mark.timeout(240)
FAST_DUMPS = {"XPU_TIMER_DUMP_TOOLS": "py-spy"}   # gdb takes seconds per rank
IDLE = os.path.join(SCRIPTS, "torchless_idle.py")   # idle.py without torch: no slow start to name


@pytest.fixture(scope="module", autouse=True)
def checkpoint_job(module_launches, tmp_path_factory):
    """The healthy checkpoint job, started with the module: it mostly sleeps
    (its checkpoint takes twice the idle timeout) while the other tests run
    theirs; its own test only judges it. -> (job, its timeline directory).
    The two hung jobs stay one after the other: each judges how soon its
    HANG came."""
    tmp_path = tmp_path_factory.mktemp("checkpoint")
    idle = 5.0
    return module_launches(["--nproc-per-node", "2", "--hang-timeout", "60s", "--idle-timeout", f"{idle}s",
                            "--timeline-path", str(tmp_path), IDLE, "checkpoint", str(2 * idle)],
                           env={"XPU_TIMER_HOST_TRACING_FUNC": "ckptlib@@save_checkpoint"}), tmp_path


def test_ddp_stall_on_gloo_is_flagged_with_the_peer_in_ddps_buffer_broadcast(launches, tmp_path):
    timeout = 3.0
    job = launches(["--nproc-per-node", "2", "--hang-timeout", f"{timeout}s", "--timeline-path", str(tmp_path),
                    "--rdzv-id", "ddp", os.path.join(SCRIPTS, "ddp.py"), "2", "forward", "600", "4"], env=FAST_DUMPS)
    stall = job.wait_line(r"^STALL ", 120)
    assert stall is not None, job.output()
    hang = job.wait_line(r"^HANG: ", timeout + 30)
    assert hang is not None, job.output()
    assert hang[0] - float(stall[1].split()[1]) <= timeout + 3.0, hang
    # Rank 0 waits in the broadcast DDP's forward issues from C++; rank 1 never got there.
    assert hang[1].startswith('HANG: rank 0 in broadcast (group "default" (ranks 0-1), seq '), hang[1]
    assert "rank 1 not in any collective" in hang[1], hang[1]
    # hang.json may land just after the HANG line
    [event] = wait_for(lambda: [d for d in event_dirs(tmp_path) if os.path.exists(os.path.join(d, "hang.json"))],
                       "hang.json")
    with open(os.path.join(event, "hang.json")) as f:
        doc = json.load(f)
    assert [(op["op"], op["ranks"]) for op in doc["hung_ops"]] == [("broadcast", [0])]
    assert doc["culprits"] == [1] and doc["reason"] == "hung_op"


def test_all_ranks_blocked_outside_collectives_are_flagged_after_the_idle_timeout(launches, tmp_path):
    idle = 5.0
    job = launches(["--nproc-per-node", "2", "--hang-timeout", "60s", "--idle-timeout", f"{idle}s",
                    "--timeline-path", str(tmp_path), "--rdzv-id", "idle", IDLE, "block", "600"], env=FAST_DUMPS)
    blocked = job.wait_line(r"^BLOCKED ", 120)
    assert blocked is not None, job.output()
    hang = job.wait_line(r"^HANG: ", idle + 30)
    assert hang is not None, job.output()
    after = hang[0] - float(blocked[1].split()[1])
    assert idle - 0.5 <= after <= idle + 4.0, f"flagged {after:.1f} s after the ranks blocked: {hang[1]}"
    assert len(job.matching(r"^HANG: ")) == 1, job.output()       # never before, and once
    assert hang[1].startswith("HANG: idle: ranks 0-1 started or finished no op for "), hang[1]
    assert "none in flight; last op all_reduce on ranks 0-1" in hang[1], hang[1]
    event = _wait_for_stacks(tmp_path, 2, 90)
    for rank in (0, 1):
        assert "wait_for_lock" in frame_names(os.path.join(event, f"rank{rank:05d}-of-00002.py.json"))
    with open(os.path.join(event, "hang.json")) as f:
        assert json.load(f)["reason"] == "idle"


def test_a_long_checkpoint_in_a_named_host_function_is_not_flagged(checkpoint_job):
    job, tmp_path = checkpoint_job
    assert job.wait(180) == 0, job.output()
    assert len(job.matching(r"^DONE rank=")) == 2, job.output()
    assert not job.matching(r"HANG"), job.output()
    assert event_dirs(tmp_path) == []
