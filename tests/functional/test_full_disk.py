"""A full --timeline-path (a filled 64 KiB tmpfs) through the real launcher:
the hang is still named, and each file that cannot be written is one line
naming its directory and the bytes it needed, never a traceback (issue 33).
The ranks are torch-free (scripts/torchless.py): the subject is the collector's
writes, not torch."""

from __future__ import annotations

import os

import pytest

from tests.functional.launch import SCRIPTS, Launch
from tests.otheruser import full_tmpfs

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def full_disk(tmp_path):
    with full_tmpfs(tmp_path / "full") as mnt:
        yield mnt


def test_a_full_timeline_disk_names_the_hang_and_says_each_file_in_one_line(full_disk):
    job = Launch(["--nproc-per-node", "3", "--hang-timeout", "3s", "--timeline-path", full_disk,
                  "--rdzv-id", "fulldisk", os.path.join(SCRIPTS, "torchless_stall.py"), "300", "8"],
                 env={"XPU_TIMER_DUMP_TOOLS": "py-spy"})
    try:
        hang = job.wait_line(r"^HANG: ", 120)
        assert hang is not None, job.output()
        event = hang[1].rsplit("stacks in ", 1)[1].rstrip("/")
        assert event.startswith(os.path.join(full_disk, "fulldisk") + "/"), hang[1]
        for name in ("hang.json", "rank00000-of-00003.py.json", "rank00002-of-00003.py.json", "timeline.json"):
            line = job.wait_line(rf"cannot write {name} in {event}: no space left \([\d,]+ bytes needed\)$", 60)
            assert line is not None, (name, job.output())
            assert len(job.matching(rf"cannot write {name} in ")) == 1, job.output()
        assert job.matching(r"cannot write collector.json"), job.output()
        assert not job.matching(r"Traceback|Errno 28"), job.output()
    finally:
        job.kill()
