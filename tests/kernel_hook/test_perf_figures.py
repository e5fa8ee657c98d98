"""The performance view's figures from records the real hook wrote against the
fake CUDA/NCCL runtime, whose kernels take known delays: GEMM TFLOP/s, all-reduce
busbw (nccl-tests factor), percentiles and launches are checked against them."""

import pytest

from diag.perf import derive
from diag.perf.window import PerfWindow
from diag.records import format as fmt
from tests.kernel_hook.conftest import read_regions, run_prog

GEMM_US, LT_US, AR_US = 20000, 5000, 30000
GEMM_FLOPS, LT_FLOPS = 2 * 128 * 64 * 32, 2 * 16 * 8 * 256 * 4   # scenario_timed's shapes


def _perf(shm, window_s=60.0):
    [region] = read_regions(str(shm))
    window = PerfWindow(window_s)
    window.observe(region.header.rank, fmt.PRODUCER_HOOK, region.records)
    perf = window.message(region.header.rank)
    return perf, derive.figures(region.header.rank, perf)


def test_timed_gemm_tflops_and_allreduce_busbw_match_the_delays(built, tmp_path):
    delays = f"cublasGemmEx={GEMM_US},cublasLtMatmul={LT_US},ncclAllReduce={AR_US}"
    out = run_prog("timed", shm_dir=str(tmp_path), env={
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "XPU_TIMER_HOOK_TIME_EVERY": "1",
        "FAKE_DELAY_US": delays})
    assert out.returncode == 0, out.stderr
    perf, fig = _perf(tmp_path)
    # 3 GEMMs of 20 ms and one Lt matmul of 5 ms: a fake kernel only runs late,
    # so the figure is at most the ideal one, and not far under it.
    ideal_tflops = (3 * GEMM_FLOPS + LT_FLOPS) / ((3 * GEMM_US + LT_US) * 1e-6) / 1e12
    assert fig.gemm_count == 4
    assert 0.5 * ideal_tflops < fig.gemm_tflops <= ideal_tflops * 1.0001
    # 2 all-reduces of 1000 floats over 4 ranks, 30 ms each: busbw = 4000 B / 30 ms x 2(n-1)/n.
    ideal_busbw = 4000 / (AR_US * 1e-6) * 2 * 3 / 4
    assert 0.5 * ideal_busbw < fig.allreduce_busbw <= ideal_busbw * 1.0001
    [ar] = [o for o in fig.ops if o.name == "ncclAllReduce"]
    assert (ar.count, ar.comm_size) == (2, 4)
    assert AR_US * 1e-6 * 0.9 <= ar.p50_s <= ar.max_s and ar.p99_s <= ar.max_s
    # 10 cudaLaunchKernel + 5 cudaLaunchKernelExC, and through the driver a
    # kernel for each of the 4 GEMMs and the 4 collectives.
    assert perf.launches == 23


def test_sampled_gemms_rate_from_the_timed_ones_but_count_all(built, tmp_path):
    """Default sampling (1 in 8): unsampled GEMMs carry FLOPs and no duration;
    TFLOP/s must come from the timed ones only, the count from all."""
    n = 64
    out = run_prog("sampled", str(n), shm_dir=str(tmp_path), env={
        "RANK": "0", "WORLD_SIZE": "2", "FAKE_DELAY_US": "cublasGemmEx=2000,ncclAllReduce=3000"})
    assert out.returncode == 0, out.stderr
    perf, fig = _perf(tmp_path)
    [gemm] = [o for o in perf.ops if o.name == "cublasGemmEx"]
    assert gemm.count == n and 2 <= gemm.timed_count <= n // 3
    ideal_tflops = 2 * 64 * 32 * 16 / 2e-3 / 1e12
    assert 0.5 * ideal_tflops < fig.gemm_tflops <= ideal_tflops * 1.0001
    # estimated device time: the timed mean for every call
    assert fig.gemm_device_s == pytest.approx(gemm.timed_ns / gemm.timed_count * n / 1e9)
    ideal_busbw = 256 * 4 / 3e-3 * 2 * 1 / 2
    assert 0.5 * ideal_busbw < fig.allreduce_busbw <= ideal_busbw * 1.0001
