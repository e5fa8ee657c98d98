"""Kernel launches through the CUDA driver are counted, whichever way the
launching library reached the driver: cuBLAS and NCCL (their runtime linked in
statically finds cuGetProcAddress_v2 with dlsym), Triton (dlsym of the launch
entry point), PyTorch (cudaGetDriverEntryPoint), programs linked against
libcuda. The runtime's own launch, which goes on to the driver, counts once.
The interposed dlsym leaves every other lookup, RTLD_NEXT included, as it was."""

import collections

from diag.records import format as fmt
from tests.kernel_hook.conftest import read_regions, run_prog

# progs/driver.cc: kernel name -> launches made through that path.
EXPECTED = {
    "k_direct": 3,        # cuLaunchKernel, cuLaunchKernel_ptsz: bound by the dynamic linker
    "k_ex": 2,            # cuLaunchKernelEx
    "k_coop": 1,          # cuLaunchCooperativeKernel
    "k_static": 3,        # dlsym(libcuda, "cuGetProcAddress_v2"), per-thread-stream variant
    "k_triton": 4,        # dlsym(libcuda, "cuLaunchKernelEx")
    "k_default": 1,       # dlsym(RTLD_DEFAULT, "cuLaunchKernel"): the hook's own export
    "k_entry": 5,         # cudaGetDriverEntryPoint("cuLaunchKernel")
    "k_entry_coop": 1,    # cudaGetDriverEntryPointByVersion("cuLaunchCooperativeKernel", 12000)
    "k_self": 2,          # cuGetProcAddress("cuGetProcAddress") -> v2 -> "cuLaunchKernelEx"
    "count_kernel": 6,    # cudaLaunchKernel, which the runtime hands on to cuLaunchKernel
    "fake_cublasGemmEx_kernel": 2,    # launched by cuBLAS inside the hooked cublasGemmEx
    "fake_ncclAllReduce_kernel": 2,   # launched by NCCL inside the hooked ncclAllReduce
}
RAN = sum(n for name, n in EXPECTED.items() if not name.startswith("fake_"))


def test_every_driver_path_is_counted_once_per_launch(built, tmp_path):
    plain = run_prog("driver", shm_dir=None, preload=False)
    out = run_prog("driver", shm_dir=str(tmp_path))
    assert (plain.returncode, plain.stderr) == (0, "")
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    # The same kernels ran on the device, hooked or not.
    assert plain.stdout.split()[:2] == out.stdout.split()[:2] == ["ran", str(RAN)]
    [region] = read_regions(str(tmp_path))
    counts = collections.Counter()
    for r in region.of(fmt.EVENT_COUNT):
        assert r.kind == fmt.KIND_KERNEL, r
        counts[r.name] += r.count
    assert counts == EXPECTED


def test_dlsym_rtld_next_still_resolves_from_the_caller(built, tmp_path):
    # From the program, the next cudaLaunchKernel after it is the hook's; had
    # the interposed dlsym resolved RTLD_NEXT from itself, the runtime's.
    plain = run_prog("driver", shm_dir=None, preload=False)
    out = run_prog("driver", shm_dir=str(tmp_path))
    assert plain.stdout.split()[2:4] == ["next", "libcudart.so.13"]
    assert out.stdout.split()[2:4] == ["next", "libxpu_timer_hook.so"]


def test_bypassed_process_counts_no_driver_launch(built, tmp_path):
    out = run_prog("driver", shm_dir=str(tmp_path), env={"XPU_TIMER_HOOK_DISABLE": "1"})
    assert (out.returncode, out.stderr) == (0, "") and out.stdout.startswith(f"ran {RAN} ")
    assert read_regions(str(tmp_path)) == []
