"""The library's build: only hooked symbols exported, no CUDA needed at link time."""

import platform
import subprocess

from tests.kernel_hook.conftest import HOOK

HOOKED = {
    "cudaLaunchKernel", "cudaLaunchKernel_ptsz", "__cudaLaunchKernel", "__cudaLaunchKernel_ptsz",
    "cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz",
    "cudaStreamBeginCapture", "cudaStreamBeginCapture_ptsz", "cudaStreamBeginCaptureToGraph",
    "cudaStreamBeginCaptureToGraph_ptsz", "cudaStreamEndCapture", "cudaStreamEndCapture_ptsz",
    "cudaStreamDestroy", "cudaDeviceReset", "cudaSetDevice",
    "cublasGemmEx", "cublasGemmStridedBatchedEx", "cublasSgemm_v2", "cublasSgemmStridedBatched",
    "cublasHgemm", "cublasLtMatmul",
    "ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclReduce",
    "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd",
    "ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommInitRankScalable", "ncclCommInitAll",
    "ncclCommSplit", "ncclCommDestroy", "ncclCommAbort",
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz",
    "cuGetProcAddress", "cuGetProcAddress_v2", "cuGetProcAddress_v2_ptsz",
    "cudaGetDriverEntryPoint", "cudaGetDriverEntryPoint_ptsz", "cudaGetDriverEntryPointByVersion",
}
CONTROLS = {"xpu_timer_hook_bypass", "xpu_timer_hook_recording"}
# Interposed to hand out wrapped driver entry points (dlsym_hook.cc); x86-64 only.
INTERPOSED = {"dlsym"} if platform.machine() == "x86_64" else set()


def _nm(*flags):
    out = subprocess.run(["nm", "-D", *flags, HOOK], capture_output=True, text=True, check=True)
    return [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]


def test_exports_exactly_the_hooked_symbols_and_the_control(built):
    assert set(_nm("--defined-only")) == HOOKED | CONTROLS | INTERPOSED


def test_exports_are_unversioned(built):
    # A named version node would stop references versioned against the real
    # libraries (cudaLaunchKernel@libcudart.so.13) from binding to the hook.
    out = subprocess.run(["objdump", "-T", HOOK], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        if line.split() and line.split()[-1] in HOOKED | INTERPOSED:
            assert "Base" in line, line


def test_needs_no_cuda_library(built):
    out = subprocess.run(["readelf", "-d", HOOK], capture_output=True, text=True, check=True)
    needed = [line for line in out.stdout.splitlines() if "NEEDED" in line]
    assert needed and not any(x in line for line in needed for x in ("cuda", "cublas", "nccl"))
