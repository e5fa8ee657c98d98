"""The launcher hands NCCL our profiler plugin (docs/link.md), unless the user
named their own: that one is kept, and said once."""

import os

from diag.launcher import config as launcher_config
from diag.launcher import runner


def env_of(args, env):
    return runner.worker_env(launcher_config.parse_args(args, env), "tok", "/d", env=env)


def test_the_plugin_is_set_for_the_workers(capsys):
    out = env_of(["t.py"], {})
    assert out["NCCL_PROFILER_PLUGIN"] == runner.PROFILER_LIB and os.path.exists(runner.PROFILER_LIB)
    assert capsys.readouterr().err == ""


def test_no_hook_means_no_plugin():
    assert "NCCL_PROFILER_PLUGIN" not in env_of(["--no-hook", "t.py"], {})


def test_a_users_own_plugin_is_kept_and_said_once(capsys, monkeypatch):
    monkeypatch.setattr(runner, "_said_profiler", False)
    theirs = {"NCCL_PROFILER_PLUGIN": "/opt/inspector/libnccl-profiler-inspector.so"}
    assert "NCCL_PROFILER_PLUGIN" not in env_of(["t.py"], theirs)   # the inherited value stays as it is
    assert "NCCL_PROFILER_PLUGIN" not in env_of(["t.py"], theirs)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "NCCL_PROFILER_PLUGIN=/opt/inspector/libnccl-profiler-inspector.so is set: keeping it" in err[0]
