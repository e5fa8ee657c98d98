"""The hook in front of the real libcudart.so.13 (no GPU needed): the versioned
reference cudaLaunchKernel@libcudart.so.13 binds to the hook, which resolves
the real function and passes its error through unchanged. Skipped where the
CUDA runtime library is not installed (CI)."""

import os
import subprocess

import pytest

from tests.kernel_hook.conftest import BUILD, HERE, HOOK

CUDA_LIB = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64")
CUDART = os.path.join(CUDA_LIB, "libcudart.so.13")

pytestmark = pytest.mark.skipif(not os.path.exists(CUDART), reason=f"{CUDART} not installed")


@pytest.fixture(scope="module")
def prog(built):
    exe = os.path.join(BUILD, "progs", "real_cudart")
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", exe,
                    os.path.join(HERE, "progs", "real_cudart.cc"), CUDART,
                    f"-Wl,-rpath,{CUDA_LIB}"], check=True, timeout=120)
    return exe


def _run(exe, env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("XPU_TIMER_", "LD_PRELOAD"))}
    return subprocess.run([exe], env={**base, **env}, capture_output=True, text=True, timeout=60)


def test_real_runtime_errors_pass_through(prog, tmp_path):
    plain = _run(prog, {})
    hooked = _run(prog, {"LD_PRELOAD": HOOK, "XPU_TIMER_SHM_DIR": str(tmp_path)})
    assert plain.returncode == hooked.returncode == 0
    assert hooked.stdout == plain.stdout and plain.stdout.startswith("launch ")
    assert int(plain.stdout.split()[1]) != 0  # no GPU here: the runtime's own error
    assert hooked.stderr == ""  # nothing it needed was missing from the real library


def test_versioned_reference_binds_to_the_hook_then_the_real_runtime(prog, tmp_path):
    out = _run(prog, {"LD_PRELOAD": HOOK, "XPU_TIMER_SHM_DIR": str(tmp_path),
                      "LD_DEBUG": "bindings"})
    lines = [l for l in out.stderr.splitlines() if "`cudaLaunchKernel'" in l]
    # The program asks for cudaLaunchKernel@libcudart.so.13 and gets the hook's...
    assert any("real_cudart" in l.split(" to ")[0] and "libxpu_timer_hook.so" in l.split(" to ")[1]
               and "[libcudart.so.13]" in l for l in lines), lines
    # ...whose own lookup (dlsym RTLD_NEXT) lands in the real library.
    assert any("libxpu_timer_hook.so" in l.split(" to ")[0] and CUDART in l.split(" to ")[1]
               for l in lines), lines
