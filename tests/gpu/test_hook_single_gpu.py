"""H100 x1: a torch training loop under xpu_timer_launch; the hook's GEMM
durations and FLOPs are plausible.   python3 -m pytest -q -s tests/gpu/test_hook_single_gpu.py"""

import json
import os

from tests.gpu.conftest import SCRIPTS, launch

GEMM_NAMES = ("cublasLtMatmul", "cublasGemmEx", "cublasGemmStridedBatchedEx", "cublasSgemm")
PEAK_BF16_TFLOPS = 990  # H100/H200 SXM dense


def test_gemms_timed_under_xpu_timer_launch(hook_built, tmp_path):
    out = launch(["--nproc-per-node", "1", "--hang-timeout", "300s", "--timeline-path",
                  str(tmp_path / "timeline"), os.path.join(SCRIPTS, "hook_gemm_train.py"),
                  str(tmp_path)], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "xpu-diag hook" not in out.stderr  # it never had to switch itself off
    with open(tmp_path / "rank0.json") as f:
        result = json.load(f)
    print(json.dumps(result, indent=1))
    assert result["region"] and not result["disabled"] and result["loss_ok"]
    gemms = {n: s for n, s in result["ops"].items() if n in GEMM_NAMES and s["timed"]}
    assert gemms, result["ops"]
    best = max(s["max_tflops"] for s in gemms.values())
    # Plausible: real work (not zero) and below the chip's peak.
    assert 1 < best < PEAK_BF16_TFLOPS
    assert all(s["failed"] == 0 for s in gemms.values())
    assert result["kernel_launches"] > 100  # elementwise kernels, counted by name
    assert sum(n in GEMM_NAMES for n in result["captured"]) >= 1  # the CUDA graph's matmul
