"""A slow GPU named from the hook's device-timed GEMMs: the fake runtime runs
rank 1's GEMMs 15 % longer (same FLOPs), through the real launcher, agent and
collector; no other rank is named, and slow.json carries the figures."""

import glob
import json
import os

import pytest

from tests.functional.launch import Launch
from tests.kernel_hook.conftest import HOOKPROG

GEMM_US = 2000.0
FLOPS = 2 * 1024 ** 3
pytestmark = pytest.mark.alone     # one SLOW verdict, judged from real processes: no other test's load beside them
# What the rule judges is in windows, not seconds (judged once every rank fills
# 0.9 of one, declared after it held half a window: about 1.5 windows in), and
# the figures come from the fake device's own clock, so a 4 s window and 14 s
# of steps (was 8 s and 28 s) leave the same 2 windows of slow steps after the
# SLOW line, in which it must not be said again.
WINDOW_S, RUN_S = 4, 14


def test_a_gemm_slowdown_of_15_percent_is_a_slow_gpu(built, tmp_path):
    launch = Launch(["--nproc-per-node", "4", "--rdzv-id", "slowgpu", "--timeline-path", str(tmp_path),
                     "--perf-window", f"{WINDOW_S}s", "--hook-time-every", "1", "--no-python", HOOKPROG, "train", str(RUN_S),
                     str(GEMM_US)],
                    env={"XPU_TIMER_TRACER_DISABLE": "1", "SLOW_RANK": "1", "SLOW_FACTOR": "1.15"})
    try:
        assert launch.wait(120) == 0, launch.output()
    finally:
        launch.kill()
    lines = launch.matching(r"SLOW: ")
    assert len(lines) == 1, launch.output()
    # The hook names the card each rank launches on (its DEVICE records): the
    # fake runtime's device 0 for all four ranks, which never call set_device.
    assert lines[0].startswith("SLOW: rank 1 (node 0, gpu 0000:1b:00.0 (GPU-fa4e0000...) shared with ranks 0,2-3) "
                               "GEMM ") and "vs job median" in lines[0], lines[0]
    [path] = glob.glob(str(tmp_path / "slowgpu" / "*" / "slow.json"))
    doc = json.load(open(path))
    assert (doc["rule"], doc["ranks"]) == ("slow_gpu", [1])
    tflops = {r["rank"]: r["gemm_tflops"] for r in doc["per_rank"]}
    expected = FLOPS / (GEMM_US * 1e-6) / 1e12
    for rank, value in tflops.items():
        want = expected / (1.15 if rank == 1 else 1.0)
        assert abs(value / want - 1) < 0.08, (rank, value, want)
    assert -0.20 < doc["deviation"] < -0.08, doc["deviation"]
    assert doc["verdict"] == lines[0][lines[0].index("SLOW: "):]
    assert os.path.dirname(path) in doc["verdict"]
