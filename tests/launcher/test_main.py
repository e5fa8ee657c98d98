"""The real xpu_timer_launch command: --version, --help order, no torch."""

import os
import subprocess

from diag import __version__
from tests.functional.launch import ROOT, launcher

HIDE_TORCH = '''import sys
class NoTorch:  # as if torch were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoTorch())
'''


def run(args, tmp_path=None, hide_torch=False):
    env = dict(os.environ)
    if hide_torch:
        (tmp_path / "sitecustomize.py").write_text(HIDE_TORCH)
        env["PYTHONPATH"] = str(tmp_path)
    return subprocess.run(launcher() + args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_without_torch_one_line_and_the_version_still_works(tmp_path):
    out = run(["--nproc-per-node", "2", "train.py"], tmp_path, hide_torch=True)
    assert out.returncode == 1 and out.stdout == "", out
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("xpu_timer_launch: cannot import torch in "), out.stderr
    assert "install the torch your cluster uses first" in out.stderr
    version = run(["--version"], tmp_path, hide_torch=True)
    assert (version.returncode, version.stdout) == (0, f"xpu_timer_launch (xpu-diag) {__version__}\n")


def test_help_shows_our_options_before_torchruns():
    out = run(["--help"])
    assert out.returncode == 0, out.stderr
    text = out.stdout
    ours, theirs = text.index("--hang-timeout D"), text.index("--nproc-per-node NPROC_PER_NODE")
    assert text.index("xpu-diag options") < ours < text.index("torchrun options (passed") < theirs
    assert text.splitlines()[0] == ("usage: xpu_timer_launch [xpu-diag options] [torchrun options] "
                                    "train.py [args]")
