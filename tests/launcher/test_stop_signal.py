"""A stop signal before torchrun handles signals still cleans up (runner.run).

The collector is held in its start-up (a sitecustomize that sleeps only in the
collector process), so SIGTERM reaches the launcher while it waits for the
collector's address: the window where Python's default action used to kill
the launcher and leave its shm directory behind.
"""

import glob
import os
import signal
import uuid

from tests.functional.launch import Launch, children_matching
from tests.waiting import poll_until

SLOW_COLLECTOR = (
    "import sys, time\n"
    "if 'diag.collector' in sys.orig_argv:\n"
    "    time.sleep(60)\n"
)


def test_sigterm_while_the_collector_starts_removes_everything(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_COLLECTOR)
    job_id = f"stop{uuid.uuid4().hex[:8]}"
    job = Launch(["--rdzv-id", job_id, "--timeline-path", str(tmp_path / "tl"),
                  "tests/scripts/sleeper.py"], env={"PYTHONPATH": str(tmp_path / "site")})
    try:
        collectors = poll_until(lambda: children_matching(job.proc.pid, "diag.collector"), 60)
        assert collectors, job.output()
        assert glob.glob(f"/dev/shm/xpu_diag-{job_id}-n0-*") or glob.glob(
            f"/tmp/xpu_diag-{job_id}-n0-*"), "the launcher made no shm directory"
        job.proc.send_signal(signal.SIGTERM)
        assert job.wait(30) == 128 + signal.SIGTERM, job.output()
    finally:
        job.kill()
    assert job.matching(r"^xpu_timer_launch: stopped by signal 15$"), job.output()
    assert not job.matching("Traceback"), job.output()
    assert not glob.glob(f"/dev/shm/xpu_diag-{job_id}-*") + glob.glob(f"/tmp/xpu_diag-{job_id}-*")
    assert poll_until(lambda: not os.path.exists(f"/proc/{collectors[0]}"), 15), \
        "the collector outlived the launcher"
