"""--hang-timeout, --blocked-after and --idle-timeout have floors (issue 43):
each refused 0 but took 1e-9, and --idle-timeout 1e-9 declared a healthy job
idle at its first report."""

from __future__ import annotations

import os
import subprocess

import pytest

from bench.launch_job import launcher
from diag.collector import config as collector_config
from diag.common import options
from diag.common.options import ConfigError
from diag.launcher import config as launcher_config

FLOORS = [(options.HANG_TIMEOUT, options.HANG_TIMEOUT_FLOOR_S),
          (options.BLOCKED_AFTER, options.BLOCKED_AFTER_FLOOR_S),
          (options.IDLE_TIMEOUT, options.IDLE_TIMEOUT_FLOOR_S)]


@pytest.mark.parametrize("opt, floor", FLOORS, ids=lambda v: getattr(v, "flag", ""))
def test_below_the_floor_is_one_line_naming_the_option_the_floor_and_the_fix(opt, floor):
    flag, env, dest = opt.flag, opt.env, opt.dest
    for value in ("1e-9", f"{floor * 0.99:g}s"):
        with pytest.raises(ConfigError) as err:
            launcher_config.parse_args([flag, value, "t.py"], {})
        assert str(err.value).startswith(f"{flag}: '{value}' is below its floor of {floor:g}s (")
        assert str(err.value).endswith(f"; use {floor:g}s or more, e.g. {opt.default}")
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=rf"^{env} \({flag}\): '1e-9' is below its floor"):
        launcher_config.parse_args(["t.py"], {env: "1e-9"})
    assert getattr(launcher_config.parse_args([flag, f"{floor:g}s", "t.py"], {}), dest) == floor
    # The collector holds a Config built in code to the same floor.
    with pytest.raises(ConfigError, match=rf"^{flag}: .* is below its floor"):
        collector_config.Config(job_id="j", token="t", **{dest: floor / 2})


def test_the_floors_follow_the_report_interval_and_silence():
    interval = options.default(options.REPORT_INTERVAL)
    assert options.HANG_TIMEOUT_FLOOR_S == interval             # one report sees an op end
    assert options.BLOCKED_AFTER_FLOOR_S == 2 * interval        # two reports agree on quiet
    assert options.IDLE_TIMEOUT_FLOOR_S == options.DEFAULT_SILENT_AFTER_S   # a late report is not idleness
    for opt, floor in FLOORS:   # every default clears its floor
        assert options.default(opt) > floor


def test_the_real_launcher_refuses_a_tiny_idle_timeout_before_any_worker(tmp_path):
    (tmp_path / "train.py").write_text("import pathlib, sys\npathlib.Path(sys.argv[1]).write_text('ran')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPU_TIMER_")}
    result = subprocess.run(launcher() + ["--timeline-path", str(tmp_path / "tl"), "--nproc-per-node", "1",
                                          "--idle-timeout", "1e-9", "train.py", str(tmp_path / "ran")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.splitlines() == [
        "xpu_timer_launch: --idle-timeout: '1e-9' is below its floor of 5s (a node's report may come that "
        "late, and a late report reads as idle); use 5s or more, e.g. 10m"]
    assert not (tmp_path / "ran").exists() and not (tmp_path / "tl").exists()
