"""What the launcher hands its workers (diag/launcher/runner.py)."""

import os
import stat

from diag.launcher import runner
from diag.launcher.config import parse_args


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
        os.rmdir(path)


def test_unknown_dump_tool_names_are_said_once_not_silently_dropped(capsys):
    chosen = runner.dump_tools({"XPU_TIMER_DUMP_TOOLS": "py-spy, gbd"})
    assert chosen == ("py-spy",)
    err = capsys.readouterr().err.splitlines()
    assert err == ["xpu_timer_launch: XPU_TIMER_DUMP_TOOLS: ignoring 'gbd' (known: "
                   f"{', '.join(runner.dumps.ALL_TOOLS)}); dumping with py-spy"]
    assert runner.dump_tools({"XPU_TIMER_DUMP_TOOLS": "gdb"}) == ("gdb",)
    assert capsys.readouterr().err == ""
