"""A collective that raises under the real launcher: its traceback holds one
frame of xpu-diag, the wrapper's (issue 43; there were two, with _call_traced)."""

from __future__ import annotations

import os

import pytest

from tests.functional.launch import SCRIPTS, launches  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(180)


def test_a_raising_collective_carries_one_frame_of_ours(launches, tmp_path):
    job = launches(["--nproc-per-node", "1", "--timeline-path", str(tmp_path),
                    os.path.join(SCRIPTS, "raising_collective.py")])
    assert job.wait(150) == 0, job.output()
    raised = sorted(job.matching(r"^RAISED "))
    assert raised == ["RAISED all_reduce ours=xpu_diag_traced@collectives.py",
                      "RAISED all_reduce_grad ours=xpu_diag_traced@collectives.py",
                      "RAISED batch_isend_irecv ours=xpu_diag_traced@collectives.py"], job.output()
    assert not job.matching(r"switched off"), job.output()
