"""Issue 41 item 4 end to end: two ranks under xpu_timer_launch call a
traced host function as fast as Python can between all-reduces, into a
ring far too small for it. No HANG while both run; then rank 1 stalls before
its next all-reduce and that stall is the one named, at the seq rank 1
really reached, with the drops said (DROPPED, and in the HANG line). The
subject is the writer's full ring and the verdict, not torch: the ranks are
torch-free (scripts/torchless.py), the tracer's host function and all-reduce
records through the same writer."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.functional.launch import SCRIPTS, launches  # noqa: F401 (fixture)
from tests.waiting import wait_for
from tests.functional.test_launch import event_dirs

pytestmark = pytest.mark.timeout(120)
RUN_S, STALL_S = 6, 15


def test_a_host_function_called_flat_out_gives_no_false_hang_and_the_stall_after_it_is_named(launches, tmp_path):
    job = launches(["--nproc-per-node", "2", "--hang-timeout", "5s", "--blocked-after", "2s",
                    "--timeline-path", str(tmp_path), "--rdzv-id", "fasthost",
                    os.path.join(SCRIPTS, "torchless_fast_host.py"), str(RUN_S), str(STALL_S), "2000"],
                   env={"XPU_TIMER_HOST_TRACING_FUNC": "ticklib@@tick", "XPU_TIMER_RING_CAPACITY": "256",
                        "XPU_TIMER_DUMP_TOOLS": "py-spy"})
    stall = job.wait_line(r"^STALL ", 90)
    assert stall is not None, job.output()
    seq = int(stall[1].split()[-1])
    hang = job.wait_line(r"^HANG: ", 20)
    assert hang is not None, job.output()
    # Nothing declared while both ranks ran: the first HANG is the stall's.
    assert hang[0] > float(stall[1].split()[1]), hang[1]
    assert hang[1].startswith(f'HANG: rank 0 in all_reduce (group "default" (ranks 0-1), seq {seq + 1}) for '), \
        hang[1]
    assert f'rank 1 not in any collective (at seq {seq} on group "default")' in hang[1], hang[1]
    assert re.search(r"; ranks? [0-9,-]+ dropped \d+ progress records \(ring full\)", hang[1]), hang[1]
    assert job.matching(r"^DROPPED: ranks? [0-9,-]+ dropped \d+ progress records"), job.output()
    [event] = wait_for(lambda: event_dirs(tmp_path), "hang.json")
    with open(os.path.join(event, "hang.json")) as f:
        doc = json.load(f)
    assert doc["culprits"] == [1] and doc["records_dropped"]["total"] > 0
    assert [n["last_started_seq"] for n in doc["never_entered"]] == [seq]
