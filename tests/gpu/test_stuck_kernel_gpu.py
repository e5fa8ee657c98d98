"""Issue 41 item 5 on one GPU: two gloo ranks share cuda:0 under xpu_timer_launch
with its defaults; rank 1 launches a kernel that never ends and waits for it in
.item() (tests/gpu/scripts/stuck_kernel.py). The collector names it by evidence
(rule stuck_kernel, with the kernel's name) within 30 s, not after the 300 s
--hang-timeout. Its output goes to GPU_RUNS_OUT (stuck_kernel.log)."""

import os
import re
import subprocess
import sys
import time

from tests.gpu.conftest import ROOT, SCRIPTS

NAMED_WITHIN_S = 30.0


def test_a_kernel_that_never_ends_is_named_by_evidence(tmp_path):
    from tests.kernel_hook.output import stop_session, wait_for_line
    out = os.environ.get("GPU_RUNS_OUT") or str(tmp_path / "out")
    os.makedirs(out, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "diag.launcher.main", "--nproc-per-node", "2",
                             "--timeline-path", str(tmp_path / "tl"), os.path.join(SCRIPTS, "stuck_kernel.py")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        line, seen = wait_for_line(proc, lambda ln: "HANG: " in ln, time.time() + 90, echo=True)
        named_at = time.time()
    finally:
        stop_session(proc, grace=15)
    with open(os.path.join(out, "stuck_kernel.log"), "w") as f:
        f.write("\n".join(seen) + "\n")
    stuck = [float(ln.split()[-1]) for ln in seen if ln.startswith("STUCK rank 1 step 20 ")]
    assert stuck, "rank 1 never launched its kernel:\n" + "\n".join(seen[-30:])
    assert line, "no HANG verdict within 90 s:\n" + "\n".join(seen[-30:])
    verdict = line[line.index("HANG: "):]
    print(f"named {named_at - stuck[0]:.1f} s after the launch: {verdict}")
    assert "rank 1 not in any collective" in verdict and "rule stuck_kernel: rank 1's kernel " in verdict
    assert re.search(r"kernel \S*spin_kernel launched \d+ s ago has not ended", verdict), verdict
    assert "it launched nothing since" in verdict
    assert named_at - stuck[0] <= NAMED_WITHIN_S, f"named {named_at - stuck[0]:.1f} s after the launch"
