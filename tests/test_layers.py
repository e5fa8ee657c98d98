"""The layers of docs/architecture.md, as pyproject.toml's [tool.importlinter]
writes them: the tree keeps them, and a change that breaks one is caught."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = str(Path(sys.executable).with_name("lint-imports"))


def lint(cwd: Path) -> subprocess.CompletedProcess:
    # PYTHONPATH first: in a copy, its diag/ (not the installed one) is analysed.
    env = dict(os.environ, PYTHONPATH=str(cwd))
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_tree_keeps_every_contract():
    res = lint(REPO)
    assert res.returncode == 0 and "0 broken" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("module, line, broken", [
    # a feature package reaching into a process package
    ("diag/perf/derive.py", "from diag.collector import config", "diag.perf.derive -> diag.collector.config"),
    # a hang rule reaching for the collector's state instead of its read-only view (api.View)
    ("diag/hang/stalled.py", "from diag.collector import state", "diag.hang.stalled -> diag.collector.state"),
    # the option registry reaching up into the tracer (issue 35's first finding)
    ("diag/common/units.py", "from diag.tracer import host_funcs", "diag.common.units -> diag.tracer.host_funcs"),
    # a circle inside the tracer: marks.py exists so that none is needed
    ("diag/tracer/marks.py", "from diag.tracer import core", "No cycles are allowed in diag.tracer"),
    # a command line imported by a feature package
    ("diag/gpu/causes.py", "from diag.timeline import cli", "diag.gpu.causes -> diag.timeline.cli"),
])
def test_a_broken_layer_is_caught(tmp_path, module, line, broken):
    for name in ("diag", "viewer"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with open(tmp_path / module, "a", encoding="utf-8") as f:
        f.write(f"\n{line}  # noqa\n")
    res = lint(tmp_path)
    assert res.returncode == 1 and broken in res.stdout, res.stdout + res.stderr
