"""`make demo`: what it prints of the stacks and how it is set up (issue 43)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACED = os.path.join(ROOT, "tests", "viewer", "data", "cases", "traced4")   # real dumps of the demo's job


def load_demo():
    spec = importlib.util.spec_from_file_location("demo", os.path.join(ROOT, "examples", "demo.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_innermost_frames_skip_the_tracers_wrappers():
    # Two of the four slots went to xpu_diag_traced and _call_traced.
    demo = load_demo()
    line = demo.innermost_python(os.path.join(TRACED, "rank00000-of-00004.py.json"))
    assert line == "all_reduce <- _exception_logger.<locals>.wrapper <- train <- <module>", line
    assert demo.innermost_python(os.path.join(TRACED, "rank00002-of-00004.py.json")) == \
        "load_next_batch <- train <- <module>"


def make_dry_run(target: str, venv) -> list[str]:
    """The commands ``make <target>`` would run with its venv at ``venv`` (make -n: nothing runs)."""
    # Not under the suite's own make: MAKELEVEL and MAKEFLAGS from `make test`
    # would have this make print its directory lines among the commands.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    proc = subprocess.run(["make", "--no-print-directory", "-n", target, f"VENV={venv}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_installs_torch_then_the_package_and_no_test_extra(tmp_path):
    # It installed the whole test extra (Lightning, transformers, Megatron-Core,
    # DeepSpeed built from source) to run a demo that needs torch and the package.
    with open(os.path.join(ROOT, "Makefile")) as f:
        torch = re.search(r"^TORCH\s+\?=\s+(\S+)", f.read(), re.M).group(1)
    pip = f"{tmp_path}/bin/pip install -q"
    demo = make_dry_run("demo", tmp_path)
    assert [line for line in demo if line.startswith(pip)] == [
        f"{pip} --upgrade pip", f"{pip} {torch} numpy", f"{pip} -e ."], demo
    assert demo[-1] == f"{tmp_path}/bin/python examples/demo.py"
    # make test's set-up is as it was.
    made = make_dry_run("setup", tmp_path)
    setup = [line for line in made if line.startswith(pip)]
    assert setup[1:3] == [f"{pip} --no-compile {torch} numpy", f"{pip} --no-compile -e '.[test]'"] \
        and "deepspeed" in setup[-1], setup
    # pip compiled nothing, and nothing compiles the whole venv: make test's
    # processes write the bytecode of what they import (tests/phases.py)
    assert not [line for line in made if "-m compileall" in line], made


def test_a_fresh_editable_install_prints_no_package_data_warning(tmp_path):
    # `pip install -e .` of a fresh clone printed 40 lines: setup.py's hook
    # build makes diag/lib after the packages were found, and its libraries
    # came back as data of a package "diag.lib" missing from `packages`. The
    # PEP 660 hook pip calls, on a copy without diag/lib, with a stand-in make.
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(os.path.join(ROOT, name), tree)
    skip = shutil.ignore_patterns("__pycache__", "lib", "*.so")
    for name in ("diag", "viewer"):
        shutil.copytree(os.path.join(ROOT, name), tree / name, ignore=skip)
    (tree / "kernel_hook").mkdir()
    fake = tmp_path / "bin" / "make"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n# the hook's build: its two libraries in diag/lib\n"
                    "mkdir -p diag/lib && : > diag/lib/libxpu_timer_hook.so && : > diag/lib/libxpu_nccl_profiler.so\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run([sys.executable, "-c", "from setuptools import build_meta as b; "
                           f"print(b.build_editable({str(tmp_path / 'wheel')!r}))"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tree / "diag" / "lib" / "libxpu_timer_hook.so").exists()   # the stand-in ran
    assert "diag.lib" not in proc.stdout + proc.stderr, proc.stderr
