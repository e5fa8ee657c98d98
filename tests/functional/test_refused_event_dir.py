"""Honest endings (issue 43): the job's directory under a shared
--timeline-path is another user's link (docs/security.md), through the real
launcher and 3 ranks, rank 2 stalled. Nothing is written there, and no
line says the stacks are there: the HANG and STACKS lines say they were not
written and why, and the agent says the refusal once, not once per file.
The ranks are torch-free (scripts/torchless.py): the subject is the
collector's and the agent's writes, not torch."""

from __future__ import annotations

import os
import time

import pytest

from tests.functional.launch import SCRIPTS, Launch
from tests.otheruser import NOBODY, as_nobody, as_root, shared_timeline

pytestmark = pytest.mark.timeout(180)


@as_root
def test_a_refused_job_dir_is_never_named_as_where_the_stacks_are():
    with shared_timeline("refused-event-dir-") as (timeline, victim):
        link = os.path.join(timeline, "refusedjob")
        as_nobody("os.symlink(sys.argv[1], sys.argv[2])", victim, link)
        job = Launch(["--nproc-per-node", "3", "--hang-timeout", "3s", "--timeline-path", timeline, "--no-hook",
                      "--rdzv-id", "refusedjob", os.path.join(SCRIPTS, "torchless_stall.py"), "300", "8"],
                     env={"XPU_TIMER_DUMP_TOOLS": "py-spy"})
        try:
            hang = job.wait_line(r"^HANG: ", 120)
            assert hang is not None, job.output()
            why = f"refusing to write under {link}: it is a link owned by uid {NOBODY}"
            # Before: "...; stacks in <the link>/<event>/", a directory never written.
            assert hang[1].endswith(f"; stacks not written ({why})"), hang[1]
            stacks = job.wait_line(r"^STACKS: ", 60)
            assert stacks is not None and stacks[1].endswith(f": no stacks written ({why})"), job.output()
            # The agent says the refusal when its upload is answered, which on
            # a loaded host can come after the collector's STACKS line; the
            # bug's per-file lines came within a second of the first.
            assert job.wait_line(r"uploading the stacks of event \S+ failed: FAILED_PRECONDITION", 60), \
                job.output()
            time.sleep(2.0)
            job.kill()
            out = job.output()
            # Before: 8 lines, "uploading stacks of rank N failed: FAILED_PRECONDITION".
            said = [ln for ln in out.splitlines() if "uploading" in ln and "stacks" in ln]
            assert len(said) == 1 and "FAILED_PRECONDITION" in said[0], said
            assert os.listdir(victim) == []
            assert f"stacks in {link}" not in out, out
        finally:
            job.kill()
