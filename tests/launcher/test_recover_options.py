"""--ckpt-persist-every, --ckpt-dir and --hang-action recover (issue 19)."""

import pytest

from diag.common import options
from diag.common.options import ConfigError, Every
from diag.launcher import recovery
from diag.launcher.config import parse_args


@pytest.mark.parametrize("text, want", [("100", Every(steps=100)), ("+7", Every(steps=7)),
                                        ("30s", Every(seconds=30.0)), ("5m", Every(seconds=300.0)),
                                        ("1.5", Every(seconds=1.5))])
def test_persist_every_reads_steps_or_a_duration_and_writes_back_the_same(text, want):
    got = options.every(text, "--ckpt-persist-every")
    assert got == want and options.every(str(got), "--ckpt-persist-every") == got


@pytest.mark.parametrize("text, message", [
    ("0", "--ckpt-persist-every: '0' must be at least 1; use e.g. 100 (steps) or 30s"),
    ("2000000000", "--ckpt-persist-every: '2000000000' is too large; at most 1000000000 (a billion steps)"),
    ("soon", "--ckpt-persist-every: 'soon' is neither a step count nor a duration; use e.g. 100 (steps) or 30s"),
    ("5 steps", "--ckpt-persist-every: '5 steps' is neither a step count nor a duration; use e.g. 100 (steps) or 30s"),
])
def test_a_bad_persist_cadence_is_one_line(text, message):
    with pytest.raises(ConfigError) as err:
        parse_args(["--ckpt-persist-every", text, "t.py"], {})
    assert str(err.value) == message


def test_recover_needs_a_restart_to_restore_into():
    with pytest.raises(ConfigError) as err:
        parse_args(["--hang-action", "recover", "t.py"], {})
    assert str(err.value) == ("--hang-action recover: torchrun's --max-restarts is 0, so nothing would restart "
                              "after the kill; add --max-restarts 1 (or more)")
    cfg = parse_args(["--hang-action", "recover", "--max-restarts", "2", "--nnodes", "1:3", "t.py"], {})
    assert (cfg.hang_action, cfg.nnodes_min, cfg.nnodes_max) == ("recover", 1, 3)


def test_the_persist_dir_defaults_under_the_timeline_and_is_what_the_workers_get(tmp_path):
    cfg = parse_args(["--timeline-path", str(tmp_path), "--rdzv-id", "job7", "t.py"], {})
    node = recovery.NodeRecovery(cfg, print)
    try:
        assert node.persist_dir == str(tmp_path / "job7" / "ckpt")
        env = node.worker_env()
        assert env["XPU_TIMER_CKPT_PERSIST_DIR"] == node.persist_dir
        assert env["XPU_TIMER_CKPT_DIR"] == node.store_dir and "xpu_diag-ckpt-job7-n0-" in node.store_dir
    finally:
        node.close()
    import os
    assert not os.path.exists(node.store_dir)
    env_cfg = parse_args(["t.py"], {"XPU_TIMER_CKPT_PERSIST_DIR": "/mnt/shared/ckpt"})
    assert env_cfg.ckpt_dir == "/mnt/shared/ckpt"


def test_a_node_that_left_exits_75_and_says_why(capsys):
    cfg = parse_args(["--nnodes", "1:2", "t.py"], {})
    lines = []
    node = recovery.NodeRecovery(cfg, lines.append)
    node.close()
    assert node.outcome(143) == 143
    node.leaving = "hang ev is blamed on this node's hardware"
    assert node.outcome(143) == 75
    assert lines == ["node 0 leaves the job: hang ev is blamed on this node's hardware; it does not "
                     "rejoin the rendezvous, the other nodes restart without it (--nnodes 1:2)"]


@pytest.mark.parametrize("argv, user, want", [
    (["t.py"], {}, {}),                                                       # no restart: nothing to fix
    (["--max-restarts", "1", "t.py"], {}, {"XPU_TIMER_ATTEMPT_STORE": "1"}),   # static (torchrun's default)
    (["--max-restarts", "1", "--standalone", "t.py"], {}, {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}),
    (["--max-restarts", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400", "t.py"], {},
     {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}),
    (["--max-restarts", "1", "--standalone", "t.py"], {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}, {}),  # the user's
    (["--max-restarts", "1", "t.py"], {"XPU_TIMER_ATTEMPT_STORE": "0"}, {}),
])
def test_a_restart_gets_a_fresh_key_space_for_its_process_group(argv, user, want):
    cfg = parse_args(argv, {})
    node = recovery.NodeRecovery(cfg, print)
    try:
        assert node.restart_env(env=user) == want
    finally:
        node.close()

