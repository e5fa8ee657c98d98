"""With --link-plugin the launcher hands NCCL our profiler plugin
(docs/link.md), unless the user named their own: that one is kept, and said
once. Without it (the default until the plugin has run on two GPUs) NCCL
gets no plugin from us."""

import os

from diag.launcher import config as launcher_config
from diag.launcher import runner


def env_of(args, env):
    return runner.worker_env(launcher_config.parse_args(args, env), "tok", "/d", env=env)


def test_the_plugin_is_opt_in():
    assert "NCCL_PROFILER_PLUGIN" not in env_of(["t.py"], {})
    assert "NCCL_PROFILER_PLUGIN" in env_of(["t.py"], {"XPU_TIMER_LINK_PLUGIN": "1"})


def test_the_plugin_is_set_for_the_workers(capsys):
    out = env_of(["--link-plugin", "t.py"], {})
    assert out["NCCL_PROFILER_PLUGIN"] == runner.PROFILER_LIB and os.path.exists(runner.PROFILER_LIB)
    assert capsys.readouterr().err == ""


def test_no_hook_means_no_plugin():
    assert "NCCL_PROFILER_PLUGIN" not in env_of(["--no-hook", "--link-plugin", "t.py"], {})


def test_a_users_own_plugin_is_kept_and_said_once(capsys, monkeypatch):
    monkeypatch.setattr(runner, "_said_profiler", False)
    theirs = {"NCCL_PROFILER_PLUGIN": "/opt/inspector/libnccl-profiler-inspector.so"}
    assert "NCCL_PROFILER_PLUGIN" not in env_of(["--link-plugin", "t.py"], theirs)   # the inherited value stays
    assert "NCCL_PROFILER_PLUGIN" not in env_of(["--link-plugin", "t.py"], theirs)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "NCCL_PROFILER_PLUGIN=/opt/inspector/libnccl-profiler-inspector.so is set: keeping it" in err[0]
