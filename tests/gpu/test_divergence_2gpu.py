"""H200 x2, real NCCL under xpu_timer_launch (hook and tracer): GPT-2-small
DDP where rank 1 skips the loss all_reduce at step 7. The HANG line names the
group as users know it ("default", ranks 0-1), the seq at which the ranks
diverged with what each ran there, and rank 1 as the culprit (it ran ahead).

    python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_divergence_2gpu.py
"""

import glob
import json
import os
import subprocess
import sys
import time

import pytest

from tests.gpu.conftest import ROOT, SCRIPTS
from tests.kernel_hook.output import stop_session, wait_for_line

HANG_TIMEOUT_S = 10
pytestmark = pytest.mark.gpus(2)


def test_ddp_rank_that_skips_the_loss_all_reduce_is_named(hook_built, tmp_path):
    pytest.importorskip("transformers")
    timeline = tmp_path / "timeline"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), SKIP_STEP="7")
    proc = subprocess.Popen(
        [sys.executable, "-m", "diag.launcher.main", "--nproc-per-node", "2", "--hang-timeout",
         f"{HANG_TIMEOUT_S}s", "--timeline-path", str(timeline), os.path.join(SCRIPTS, "ddp_skip_loss.py")],
        cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        skip, seen = wait_for_line(proc, lambda l: l.startswith("SKIP "), time.time() + 300, echo=True)
        assert skip, "rank 1 never reached the skip:\n" + "\n".join(seen[-30:])
        t_skip = float(skip.split()[1])
        hang, seen = wait_for_line(proc, lambda l: "HANG: " in l, t_skip + HANG_TIMEOUT_S + 60, echo=True)
        assert hang, "no HANG verdict"
        print(f"flagged {time.time() - t_skip:.1f} s after the skip (timeout {HANG_TIMEOUT_S} s)")
        verdict = hang[hang.index("HANG: "):]
        assert 'group "default" (ranks 0-1)' in verdict, verdict
        assert "the ranks diverged at seq " in verdict and "rank 0 all_reduce 4 B (float32, sum)" in verdict, verdict
        report = None
        deadline = time.time() + 60
        while report is None and time.time() < deadline:
            for path in glob.glob(str(timeline / "*" / "*" / "hang.json")):
                with open(path) as f:
                    report = json.load(f)
            time.sleep(0.5)
        assert report and report["culprits"] == [1], report and report["culprits"]
        [group] = report["mismatch"]["groups"]
        print("mismatch:", json.dumps(group))
        assert group["group"] == "default" and group["members"] == "0-1"
        assert [v["ranks"] for v in group["variants"]] == [[0], [1]]
    finally:
        stop_session(proc)
