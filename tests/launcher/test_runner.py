"""What the launcher hands its workers (diag/launcher/runner.py)."""

import glob
import os
import shutil
import stat
import subprocess
import sys

import pytest

from diag.common import owned_dirs
from diag.launcher import runner
from diag.launcher.config import parse_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_worker_env_prepends_bootstrap_and_hook(tmp_path, monkeypatch):
    hook = tmp_path / "libxpu_timer_hook.so"
    hook.write_bytes(b"\x7fELF")
    monkeypatch.setattr(runner, "HOOK_LIB", str(hook))
    env = runner.worker_env(parse_args(["python", "-u", "t.py"], {}), "tok", "/dev/shm/x",
                            env={"PYTHONPATH": "/mine", "LD_PRELOAD": "/other.so"})
    assert env["PYTHONPATH"] == os.pathsep.join([runner.BOOTSTRAP_DIR, "/mine"])
    assert env["LD_PRELOAD"] == f"{hook} /other.so"
    assert (env["XPU_TIMER_JOB_TOKEN"], env["XPU_TIMER_SHM_DIR"], env["PYTHONUNBUFFERED"]) == (
        "tok", "/dev/shm/x", "1")
    assert os.path.exists(os.path.join(runner.BOOTSTRAP_DIR, "sitecustomize.py"))


def test_no_hook_or_no_library_means_no_preload(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "HOOK_LIB", str(tmp_path / "missing.so"))
    assert "LD_PRELOAD" not in runner.worker_env(parse_args(["t.py"], {}), "t", "/d", env={})
    (tmp_path / "missing.so").write_bytes(b"")
    cfg = parse_args(["--no-hook", "t.py"], {})
    assert "LD_PRELOAD" not in runner.worker_env(cfg, "t", "/d", env={})
    assert "PYTHONUNBUFFERED" not in runner.worker_env(cfg, "t", "/d", env={})


def test_shm_dir_is_private(monkeypatch):
    path = runner.make_shm_dir(parse_args(["--rdzv-id", "priv", "t.py"], {}))
    try:
        assert os.path.basename(path).startswith("xpu_diag-priv-n0-")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    finally:
        owned_dirs.remove(path)   # the launcher's own removal (the directory holds its owner mark)


def test_dump_tools_reach_the_agent_and_unset_means_the_default():
    chosen = parse_args(["t.py"], {"XPU_TIMER_DUMP_TOOLS": "gdb, py-spy,"})
    assert runner.agent_config(chosen, "h:1", "t", "/d", {}).dump_tools == ("gdb", "py-spy")
    default = runner.agent_config(parse_args(["t.py"], {}), "h:1", "t", "/d", {})
    assert default.dump_tools == runner.dumps.default_tools()


@pytest.mark.parametrize("path", ["/proc/nope", "/proc", "{file}/sub"])
def test_an_unwritable_timeline_stops_the_launch_before_anything_starts(tmp_path, capsys, path):
    # os.access says yes to root on /proc (the tests run as root); the runner writes to find out.
    (tmp_path / "file").write_text("x")
    path = path.replace("{file}", str(tmp_path / "file"))
    (tmp_path / "t.py").write_text("")
    config = parse_args(["--timeline-path", path, "--rdzv-id", "bad-tl", str(tmp_path / "t.py")], {})
    assert runner.run(config) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"xpu_timer_launch: --timeline-path: cannot write in {path!r}"), err
    assert glob.glob("/dev/shm/xpu_diag-bad-tl-*") == []       # nothing was started


def test_only_the_node_that_starts_the_collector_needs_the_timeline(tmp_path):
    for argv in (["--collector", "10.0.0.1:5000"], ["--nnodes", "2", "--node-rank", "1"]):
        config = parse_args(argv + ["--timeline-path", "/proc/nope", "t.py"], {})
        assert runner.timeline_problem(config) is None
    good = parse_args(["--timeline-path", str(tmp_path / "tl"), "t.py"], {})
    assert runner.timeline_problem(good) is None and os.listdir(tmp_path / "tl") == []


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_the_default_timeline_as_non_root_says_what_to_pass():
    # A real non-root user (nobody) meets the default /root/timeline.
    code = ("from diag.launcher.config import parse_args; from diag.launcher import runner; "
            "print(runner.timeline_problem(parse_args(['t.py'], {})))")
    out = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                          sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, HOME="/nonexistent"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "--timeline-path: the default '/root/timeline' is not writable by user nobody "
        "(Permission denied); pass --timeline-path DIR or set XPU_TIMER_TIMELINE_PATH, "
        "e.g. --timeline-path /tmp/xpu-timeline-nobody")
