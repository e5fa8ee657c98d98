"""A healthy job must exit 0 under the launcher, every time (issue 11, item 1).

The job ends with destroy_process_group() and no final barrier: the pattern
that aborted ranks with SIGABRT while the tracer held its process groups."""

from __future__ import annotations

import os

import pytest

from diag.common.net import free_port
from tests.functional.launch import SCRIPTS, Launch
from tests.soak import runs

EXIT_RACE = os.path.join(SCRIPTS, "exit_race.py")
RUNS, AT_ONCE = runs(6, 10), 2   # 10 under `make soak`
pytestmark = pytest.mark.timeout(240)


def test_healthy_jobs_exit_zero_every_time_under_the_launcher(tmp_path):
    failed = []
    for first in range(0, RUNS, AT_ONCE):
        batch = []
        for run in range(first, first + AT_ONCE):
            no_hook = ["--no-hook"] if run % 2 else []   # with and without the C++ hook
            batch.append((run, Launch(no_hook + [
                "--nproc-per-node", "4", "--master-port", str(free_port()),
                "--timeline-path", str(tmp_path / str(run)), EXIT_RACE])))
        for run, job in batch:
            try:
                code = job.wait(120)
            finally:
                job.kill()
            if code != 0:
                failed.append((run, code, job.output()[-3000:]))
    assert not failed, f"{len(failed)} of {RUNS} runs failed; first: {failed[0]}"
