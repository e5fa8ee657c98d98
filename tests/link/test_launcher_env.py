"""The launcher hands NCCL our profiler plugin by default (docs/link.md),
unless the user named their own (that one is kept, and said once), or asked
for none (--no-link-plugin, XPU_TIMER_NO_LINK_PLUGIN=1)."""

import os

import pytest

from diag.common.options import ConfigError
from diag.launcher import config as launcher_config
from diag.launcher import runner


def env_of(args, env):
    return runner.worker_env(launcher_config.parse_args(args, env), "tok", "/d", env=env)


def test_the_plugin_is_on_by_default_and_can_be_left_out():
    assert env_of(["t.py"], {})["NCCL_PROFILER_PLUGIN"] == runner.PROFILER_LIB
    assert env_of(["--link-plugin", "t.py"], {})["NCCL_PROFILER_PLUGIN"] == runner.PROFILER_LIB   # the old opt-in
    assert "NCCL_PROFILER_PLUGIN" not in env_of(["--no-link-plugin", "t.py"], {})
    assert "NCCL_PROFILER_PLUGIN" not in env_of(["t.py"], {"XPU_TIMER_NO_LINK_PLUGIN": "1"})


def test_asking_for_it_and_for_none_is_one_line():
    with pytest.raises(ConfigError, match=r"^--link-plugin and --no-link-plugin: choose one"):
        launcher_config.parse_args(["--link-plugin", "--no-link-plugin", "t.py"], {})


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
