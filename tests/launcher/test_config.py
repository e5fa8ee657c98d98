"""parse_args(argv, env) -> Config: pure, validated, one-line errors."""

import pytest

from diag.launcher.config import ConfigError, parse_args
from diag.launcher.main import main


def parse(*argv, env=None):
    return parse_args(list(argv), env or {})


def test_defaults_and_torchrun_options_pass_through_verbatim():
    cfg = parse("--nproc-per-node", "4", "--max-restarts=1", "train.py", "--lr", "0.1")
    assert cfg.torchrun_argv == ["--nproc-per-node", "4", "--max-restarts=1", "train.py",
                                 "--lr", "0.1"]
    assert (cfg.hang_timeout_s, cfg.timeline_path, cfg.collector, cfg.hang_action, cfg.no_hook) == (
        300.0, "/root/timeline", None, "report", False)
    assert cfg.fault_list is None and cfg.fault_list_max_age == 24 * 3600
    assert cfg.starts_collector and cfg.collector_listen() == "127.0.0.1:0"


def test_own_options_are_removed_and_script_args_are_left_alone(tmp_path):
    cfg = parse("--hang-timeout", "10s", "--nproc-per-node", "2", f"--timeline-path={tmp_path}",
                "--hang-action", "kill", "--no-hook", "--collector", "10.0.0.1:5000",
                "train.py", "--hang-timeout", "3", "--no-hook")
    assert cfg.torchrun_argv == ["--nproc-per-node", "2", "train.py", "--hang-timeout", "3",
                                 "--no-hook"]
    assert (cfg.hang_timeout_s, cfg.timeline_path, cfg.hang_action, cfg.no_hook, cfg.collector) == (
        10.0, str(tmp_path), "kill", True, "10.0.0.1:5000")
    assert not cfg.starts_collector


@pytest.mark.parametrize("argv, expected", [
    (["python", "train.py", "-x"], ["train.py", "-x"]),
    (["python3", "train.py"], ["train.py"]),
    (["/usr/bin/python3.11", "-u", "train.py"], ["train.py"]),
    (["python", "-m", "pkg.mod", "--a"], ["--module", "pkg.mod", "--a"]),
    (["-m", "pkg.mod", "--a"], ["-m", "pkg.mod", "--a"]),
    (["train.py"], ["train.py"]),
])
def test_python_prefix_and_module_forms(argv, expected):
    assert parse("--nproc-per-node", "2", *argv).torchrun_argv == ["--nproc-per-node", "2"] + expected


def test_unbuffered_flag_is_kept_as_env():
    assert parse("python", "-u", "t.py").unbuffered and not parse("t.py").unbuffered


def test_env_equivalents_and_flags_win(tmp_path):
    env = {"XPU_TIMER_HANG_TIMEOUT": "2m", "XPU_TIMER_TIMELINE_PATH": str(tmp_path),
           "XPU_TIMER_HANG_ACTION": "kill", "XPU_TIMER_NO_HOOK": "1",
           "XPU_TIMER_COLLECTOR": "h:1", "XPU_TIMER_FAULT_LIST": "/x/faults.json",
           "XPU_TIMER_FAULT_LIST_MAX_AGE": "1h"}
    cfg = parse("t.py", env=env)
    assert (cfg.hang_timeout_s, cfg.timeline_path, cfg.hang_action, cfg.no_hook, cfg.collector,
            cfg.fault_list, cfg.fault_list_max_age) == (
        120.0, str(tmp_path), "kill", True, "h:1", "/x/faults.json", 3600.0)
    assert parse("--hang-timeout", "5", "t.py", env=env).hang_timeout_s == 5.0
    assert not parse("t.py", env={"XPU_TIMER_NO_HOOK": "0"}).no_hook


def test_job_id_comes_from_rdzv_id_then_env_and_is_sanitised():
    assert parse("--rdzv-id", "my/job:1", "t.py").job_id == "myjob1"
    assert parse("t.py", env={"TORCHELASTIC_RUN_ID": "abc"}).job_id == "abc"
    assert parse("t.py").job_id.startswith("job-")
    # Multi-node without an id: every node derives the same one.
    argv = ["--nnodes", "2", "--master-addr", "10.1.1.1", "--master-port", "6000", "t.py"]
    assert parse(*argv).job_id == parse(*argv).job_id == "job-10.1.1.1-6000"


def test_hook_time_every_from_flag_or_env_reaches_the_workers():
    assert parse("t.py").hook_time_every is None
    assert parse("--hook-time-every", "1", "t.py").hook_time_every == 1
    cfg = parse("t.py", env={"XPU_TIMER_HOOK_TIME_EVERY": "16"})
    assert cfg.hook_time_every == 16
    from diag.launcher import runner
    assert runner.worker_env(cfg, "t", "/d", env={})["XPU_TIMER_HOOK_TIME_EVERY"] == "16"


def test_hook_completion_from_flag_or_env_reaches_the_workers():
    assert parse("t.py").hook_completion is None
    assert parse("--hook-completion", "event", "t.py").hook_completion == "event"
    cfg = parse("t.py", env={"XPU_TIMER_HOOK_COMPLETION": "fence"})
    from diag.launcher import runner
    assert runner.worker_env(cfg, "t", "/d", env={})["XPU_TIMER_HOOK_COMPLETION"] == "fence"
    assert "XPU_TIMER_HOOK_COMPLETION" not in runner.worker_env(parse("t.py"), "t", "/d", env={})


def test_multi_node_collector_address():
    cfg = parse("--nnodes", "2", "--node-rank", "1", "--master-addr", "10.1.1.1",
                "--master-port", "6000", "t.py")
    assert not cfg.starts_collector and cfg.collector_listen() == "10.1.1.1:6001"
    assert parse("--nnodes", "1:4", "--rdzv-endpoint", "h:7000", "t.py").collector_listen() == "h:7001"


@pytest.mark.parametrize("argv, option", [
    (["--hang-timeout", "soon", "t.py"], "--hang-timeout"),
    (["--hang-timeout", "0", "t.py"], "--hang-timeout"),
    (["--hang-timeout", "-5s", "t.py"], "--hang-timeout"),
    (["--hang-action", "explode", "t.py"], "--hang-action"),
    (["--collector", "nohostport", "t.py"], "--collector"),
    (["--collector", "h:99999", "t.py"], "--collector"),
    (["--fault-list-max-age", "old", "t.py"], "--fault-list-max-age"),
    (["--hook-time-every", "0", "t.py"], "--hook-time-every"),
    (["--hook-time-every", "often", "t.py"], "--hook-time-every"),
    (["--hook-completion", "sometimes", "t.py"], "--hook-completion"),
    (["--timeline-path", "", "t.py"], "--timeline-path"),
    (["--nproc-per-node", "2"], "training script"),
    (["--nnodes", "x:y", "t.py"], "--nnodes"),
    (["python", "-c", "print(1)"], "python option"),
    (["--no-such-option", "t.py"], "--no-such-option"),
    (["--nodes-per-relay", "-1", "t.py"], "--nodes-per-relay"),
    (["--nodes-per-relay", "8", "--ingest-procs", "2", "t.py"], "--nodes-per-relay 8: choose one"),
])
def test_bad_values_are_one_line_errors_naming_the_option(argv, option):
    with pytest.raises(ConfigError) as info:
        parse(*argv)
    message = str(info.value)
    assert option in message and "\n" not in message


def test_nodes_per_relay_goes_to_node_zeros_collector():
    from diag.launcher.collector_proc import collector_argv
    cfg = parse("--nodes-per-relay", "32", "t.py")
    argv = collector_argv(cfg, "addr")
    assert argv[argv.index("--nodes-per-relay") + 1] == "32"


def test_parsing_creates_nothing(tmp_path):
    # Whether the path can be written is the runner's to try (tests/launcher/test_runner.py).
    assert parse("--timeline-path", str(tmp_path / "new" / "deeper"), "t.py")
    assert not (tmp_path / "new").exists()


def test_main_prints_one_line_and_exits_2(capsys):
    assert main(["--hang-action", "maybe", "t.py"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("xpu_timer_launch: --hang-action")


def test_help_names_own_values_by_kind_not_by_a_made_up_variable(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for shown in ("--hang-timeout D", "--timeline-path DIR", "--collector HOST:PORT",
                  "--hang-action {report,kill,recover}", "--hook-time-every N"):
        assert shown in out
    assert "XPU_HANG_TIMEOUT" not in out and "[XPU_TIMER_HANG_TIMEOUT]" in out


@pytest.mark.parametrize("var, value, option", [
    ("XPU_TIMER_HANG_TIMEOUT", "soon", "--hang-timeout"),
    ("XPU_TIMER_HANG_ACTION", "maybe", "--hang-action"),
    ("XPU_TIMER_COLLECTOR", "nohost", "--collector"),
    ("XPU_TIMER_FAULT_LIST_MAX_AGE", "old", "--fault-list-max-age"),
    ("XPU_TIMER_HOOK_TIME_EVERY", "0", "--hook-time-every"),
    ("XPU_TIMER_NO_HOOK", "maybe", "--no-hook"),
])
def test_a_bad_env_value_is_named_by_its_variable(var, value, option):
    """The user set the variable, not the flag: the message must say which."""
    with pytest.raises(ConfigError) as info:
        parse_args(["t.py"], {var: value})
    assert str(info.value).startswith(f"{var} ({option}): {value!r}")
    if option == "--no-hook":                     # a switch: the flag wins over the variable
        assert parse_args([option, "t.py"], {var: value}).no_hook
        return
    with pytest.raises(ConfigError) as info:      # the flag still wins, and is named as given
        parse_args([option, value, "t.py"], {var: "1"})
    assert str(info.value).startswith(f"{option}: {value!r}")


@pytest.mark.parametrize("value, expected", [("1", True), ("yes", True), ("ON", True),
                                             ("0", False), ("false", False), ("off", False)])
def test_no_hook_env_words(value, expected):
    assert parse_args(["t.py"], {"XPU_TIMER_NO_HOOK": value}).no_hook is expected
