"""GPU-only tests: skipped cleanly where torch sees no CUDA device."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "tests", "gpu", "scripts")


def cuda_devices() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def pytest_collection_modifyitems(config, items):
    n = cuda_devices()
    for item in items:
        if "tests/gpu/" not in str(item.fspath):
            continue
        item.add_marker(pytest.mark.gpu)
        need = item.get_closest_marker("gpus")
        want = need.args[0] if need else 1
        if n < want:
            item.add_marker(pytest.mark.skip(reason=f"needs {want} CUDA GPU(s), found {n}"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpus(n): needs at least n CUDA GPUs")


@pytest.fixture(scope="session")
def hook_built() -> str:
    out = subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "kernel_hook")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return os.path.join(ROOT, "diag", "lib", "libxpu_timer_hook.so")


def launch(args: list[str], timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs xpu_timer_launch (python -m diag.launcher.main) with args."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, e.get("PYTHONPATH")]))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "diag.launcher.main", *args], cwd=ROOT, env=e,
                          capture_output=True, text=True, timeout=timeout)
