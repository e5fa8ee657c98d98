"""Issue 33 items 4, 6 and 7 end to end through the real xpu_timer_launch:
the node-0 collector paused, killed, or left behind by a killed launcher.

The three jobs the tests that are not `alone` act on are started together by
one module fixture: each idles until its test kills something in it (was:
each started in its test, one start-up after another). The subject is the
launcher and its collector, not torch: the ranks are torch-free
(scripts/torchless.py), the same records through the same writer."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import time

import pytest

from diag.common.options import DEFAULT_SILENT_AFTER_S
from tests.functional.launch import SCRIPTS, children_matching, module_launches  # noqa: F401 (fixture)
from tests.functional.test_launch import launches  # noqa: F401
from tests.waiting import poll_until

pytestmark = pytest.mark.timeout(240)
STALL_ON_FILE = os.path.join(SCRIPTS, "torchless_stall_on_file.py")
STALL = os.path.join(SCRIPTS, "torchless_stall.py")


@pytest.mark.alone   # it stops the collector for a set time and judges what is said after
def test_a_stopped_collector_blames_no_agent_for_its_own_pause(launches, tmp_path):
    """The host frozen whole (a VM paused): the collector and the launcher
    (its agent) stop together; the collector comes back first, so no report
    can be waiting for it. Before: "SILENT: rank 0 ... agent sent no report
    for 7.x s" at its first tick; the agent's silence was the collector's pause."""
    silent_s = DEFAULT_SILENT_AFTER_S   # not a launcher option
    job = launches(["--nproc-per-node", "1", "--hang-timeout", "60s", "--timeline-path", str(tmp_path),
                    STALL_ON_FILE, str(tmp_path / "never"), "-1"])
    assert job.wait_line(r"^STARTED rank=0", 120), job.output()   # its rank reported many times by then
    [collector] = children_matching(job.proc.pid, "diag.collector")
    os.kill(collector, signal.SIGSTOP)
    os.kill(job.proc.pid, signal.SIGSTOP)
    try:
        # The pause under test: longer than --silent-after (3.5 s). A second
        # over it (was two) leaves every agent 4.5 s and more without a report
        # at the collector's first tick: the SILENT line of before, had the
        # pause not been forgiven.
        time.sleep(silent_s + 1.0)
        os.kill(collector, signal.SIGCONT)
        paused = job.wait_line(r"the collector itself did not run for \d+\.\d s \(stopped, or no CPU\)", 5.0)
    finally:
        os.kill(collector, signal.SIGCONT)
        os.kill(job.proc.pid, signal.SIGCONT)
    assert job.wait_line(r"^SILENT", 3.0) is None, job.output()
    assert paused is not None, job.output()


@pytest.fixture(scope="module")
def jobs(module_launches, tmp_path_factory):
    """name -> (job, its tmp directory, its job id): the jobs of the three tests
    below, started at once; each waits on a file that never comes (or comes
    when its test says)."""
    started = {}
    tmp_path, job_id = tmp_path_factory.mktemp("killed"), f"killed-{os.getpid()}"
    started["launcher-killed"] = (module_launches(
        ["--nproc-per-node", "2", "--rdzv-id", job_id, "--hang-timeout", "60s",
         "--timeline-path", str(tmp_path), STALL_ON_FILE, str(tmp_path / "never"), "-1"]), tmp_path, job_id)
    tmp_path, job_id = tmp_path_factory.mktemp("restarted"), f"restarted-{os.getpid()}"
    started["collector-restarted"] = (module_launches(
        ["--nproc-per-node", "2", "--hang-timeout", "3s", "--timeline-path", str(tmp_path / "tl"),
         "--rdzv-id", job_id, STALL_ON_FILE, str(tmp_path / "stall-now"), "1"],
        env={"XPU_TIMER_DUMP_TOOLS": "py-spy"}), tmp_path, job_id)
    tmp_path = tmp_path_factory.mktemp("cannot-start")
    started["cannot-start"] = (module_launches(
        ["--nproc-per-node", "1", "--hang-timeout", "60s", "--timeline-path", str(tmp_path / "tl"),
         STALL_ON_FILE, str(tmp_path / "never"), "-1"]), tmp_path, None)
    return started


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper (a container's PID 1 may never reap)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def test_a_launcher_killed_by_sigkill_takes_its_workers_and_collector_along(jobs, launches):
    """Before: the workers and the collector ran on under PID 1 for minutes,
    and the node's two /dev/shm directories (progress regions, snapshot
    store) stayed. Now they die with it, and the next launcher sweeps them."""
    job, tmp_path, job_id = jobs["launcher-killed"]
    assert job.wait_line(r"^STARTED rank=1", 120) and job.wait_line(r"^STARTED rank=0", 30), job.output()
    collectors = children_matching(job.proc.pid, "diag.collector")
    workers = children_matching(job.proc.pid, "stall_on_file.py")
    left = glob.glob(f"/dev/shm/xpu_diag-{job_id}-*") + glob.glob(f"/dev/shm/xpu_diag-ckpt-{job_id}-*")
    assert len(collectors) == 1 and len(workers) == 2 and len(left) == 2, (collectors, workers, left)
    try:
        os.kill(job.proc.pid, signal.SIGKILL)   # the launcher alone, as the OOM killer would
        job.proc.wait(10)
        assert poll_until(lambda: not any(alive(p) for p in collectors + workers), 10.0), \
            [p for p in collectors + workers if alive(p)]
    finally:
        for pid in collectors + workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert all(os.path.isdir(d) for d in left)   # nothing of the launcher ran to remove them
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    after = launches(["--nproc-per-node", "1", "--timeline-path", str(tmp_path), STALL, "0", "1"],
                     env={"TMPDIR": str(tmpdir)})
    assert after.wait(120) == 0, after.output()
    assert not any(os.path.exists(d) for d in left), left
    # torch's log directory (/tmp/torchelastic_*, never removed by torch) went in the launcher's own.
    assert os.listdir(tmpdir) == []


def test_a_collector_killed_by_sigkill_is_started_again_and_names_a_later_stall(jobs):
    """Before: training went on, but nothing started the collector again, and
    a stall later in the job got no HANG line, only "collector ... unreachable"."""
    job, tmp_path, job_id = jobs["collector-restarted"]
    flag = tmp_path / "stall-now"
    assert job.wait_line(r"^STARTED rank=1", 120) and job.wait_line(r"^STARTED rank=0", 30), job.output()
    [first] = children_matching(job.proc.pid, "diag.collector")
    killed_at = time.time()
    os.kill(first, signal.SIGKILL)
    back = job.wait_line(r"the collector is back on 127\.0\.0\.1:\d+ \(pid \d+\)", 60)
    assert back is not None, job.output()
    assert poll_until(lambda: any(when > killed_at and "agent connected: node 0" in line   # to the new one
                                  for when, _, line in list(job.lines)), 30), job.output()
    [second] = children_matching(job.proc.pid, "diag.collector")
    assert second != first and f"(pid {second})" in back[1]
    flag.touch()
    assert job.wait_line(r"^STALL ", 30), job.output()
    hang = job.wait_line(r"^HANG: ", 30)
    assert hang is not None, job.output()
    assert hang[1].startswith("HANG: rank 0 in all_reduce") and "rank 1 not in any collective" in hang[1], hang[1]
    # The restarted collector is the keeper thread's child: it too dies with a killed launcher.
    os.kill(job.proc.pid, signal.SIGKILL)
    assert poll_until(lambda: not alive(second), 10.0), job.output()
    for path in glob.glob(f"/dev/shm/xpu_diag-*{job_id}-n0-*"):   # the next launcher's sweep, done here
        shutil.rmtree(path)


def test_a_collector_that_cannot_start_again_leaves_one_loud_line(jobs):
    job, tmp_path, _ = jobs["cannot-start"]
    timeline = tmp_path / "tl"
    assert job.wait_line(r"^STARTED rank=0", 120), job.output()
    os.rename(timeline, tmp_path / "moved")
    timeline.write_text("not a directory")   # a restarted collector refuses it: exit 2
    [collector] = children_matching(job.proc.pid, "diag.collector")
    os.kill(collector, signal.SIGKILL)
    off = job.wait_line(r"^xpu_timer_launch: HANG DETECTION IS OFF for the rest of this job: the collector "
                        r"\(pid \d+\) killed by SIGKILL and did not start again in 3 tries", 60)
    assert off is not None, job.output()
    assert len(job.matching(r"HANG DETECTION IS OFF")) == 1, job.output()
    assert job.proc.poll() is None   # training goes on
