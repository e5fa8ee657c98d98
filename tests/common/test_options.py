"""The one option spec: round trips, env fallback, one-line errors, and that
the launcher, collector and agent all read the same declarations."""

import argparse

import pytest

from diag.collector import config as collector_config
from diag.common import options
from diag.common.options import ConfigError
from diag.launcher import collector_proc
from diag.launcher import config as launcher_config
from diag.netcheck import config as netcheck_config

TOKEN = {"XPU_TIMER_JOB_TOKEN": "tok"}


def test_one_config_error_everywhere():
    assert launcher_config.ConfigError is collector_config.ConfigError is ConfigError
    assert netcheck_config.ConfigError is ConfigError


@pytest.mark.parametrize("config", [
    collector_config.Config(job_id="j-1", token="tok"),
    collector_config.Config(job_id="job.2", token="tok", listen="[::1]:5000", timeline_path="/tmp/x y",
                            hang_timeout_s=1.1 + 2.2, hang_action="kill", address_file="/tmp/a",
                            silent_after_s=7.25, dump_timeout_s=1e-3, max_dump_bytes=12345,
                            max_agents=3, stats_interval_s=86400.0),
])
def test_collector_config_round_trips_through_argv(config):
    argv = collector_config.to_argv(config)
    assert collector_config.parse_args(argv, TOKEN) == config
    # and argv is plain flags: every option declared for the collector, nothing else
    flags = {a for a in argv if a.startswith("--")}
    assert flags <= {opt.flag for opt in options.COLLECTOR}


def test_launcher_starts_the_collector_with_what_it_parsed(tmp_path):
    cfg = launcher_config.parse_args(
        ["--hang-timeout", "1.5m", "--hang-action", "kill", "--timeline-path", str(tmp_path), "t.py"], {})
    argv = collector_proc.collector_argv(cfg, str(tmp_path / "addr"))
    parsed = collector_config.parse_args(argv, TOKEN)
    assert (parsed.hang_timeout_s, parsed.hang_action, parsed.timeline_path, parsed.job_id) == (
        90.0, "kill", str(tmp_path), cfg.job_id)
    assert parsed.address_file == str(tmp_path / "addr")


def test_every_launcher_option_has_a_config_field_of_its_name():
    for config, opts in ((launcher_config.Config, options.LAUNCHER),
                         (collector_config.Config, options.COLLECTOR)):
        fields = set(config.__dataclass_fields__)
        assert {o.dest for o in opts} <= fields


def test_env_fills_in_and_errors_name_the_variable(tmp_path):
    cfg = launcher_config.parse_args(["t.py"], {"XPU_TIMER_HANG_TIMEOUT": "2m",
                                                "XPU_TIMER_REPORT_INTERVAL": "250ms"})
    assert (cfg.hang_timeout_s, cfg.report_interval) == (120.0, 0.25)
    with pytest.raises(ConfigError, match=r"^XPU_TIMER_HANG_TIMEOUT \(--hang-timeout\): 'soon' is not a duration"):
        launcher_config.parse_args(["t.py"], {"XPU_TIMER_HANG_TIMEOUT": "soon"})
    with pytest.raises(ConfigError, match=r"^XPU_TIMER_REPORT_INTERVAL: 'x' is not a duration"):
        launcher_config.parse_args(["t.py"], {"XPU_TIMER_REPORT_INTERVAL": "x"})


def test_the_flag_beats_the_environment():
    cfg = launcher_config.parse_args(["--hook-time-every", "3", "t.py"], {"XPU_TIMER_HOOK_TIME_EVERY": "9"})
    assert cfg.hook_time_every == 3


def test_a_new_option_needs_only_its_declaration():
    """What another engineer does to add one: declare, parse, serialise back."""
    window = options.Option("--some-window", "XPU_TIMER_SOME_WINDOW", "30s", options.duration,
                            help="w", format=options.seconds_text)
    parser = options.parser("prog")
    options.add_arguments(parser, [window])
    assert options.resolve(parser.parse_args([]), [window]) == {"some_window": 30.0}
    got = options.resolve(parser.parse_args([]), [window], env={"XPU_TIMER_SOME_WINDOW": "2m"})
    assert got == {"some_window": 120.0}
    back = options.to_argv([window], {"some_window": 0.1})
    assert options.resolve(parser.parse_args(back), [window]) == {"some_window": 0.1}
    assert options.env_for([window], {"some_window": 0.1}) == {"XPU_TIMER_SOME_WINDOW": "0.1s"}


def test_one_line_parser_raises_instead_of_exiting():
    parser = options.parser("prog")
    parser.add_argument("--n", type=int)
    with pytest.raises(ConfigError, match="invalid int value"):
        parser.parse_args(["--n", "x"])
    assert isinstance(parser, argparse.ArgumentParser)
