"""Bad input to xpu_timer_launch (issue 23): one line, exit 2, no worker.

Unit tests on parse_args and the runner's checks first, then the real CLI in
subprocesses whose training script would leave a file behind if it ran.
"""

import dataclasses
import os
import socket
import stat

import pytest
import torch

from diag.launcher import collector_proc, runner
from diag.launcher.config import ConfigError, parse_args
from tests import preloaded
from tests.functional.launch import launcher

NPROC_FIX = "use auto, cpu, gpu, xpu or a number from 1 to 1024"


def parse(*argv, env=None):
    return parse_args(list(argv), env or {})


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1025", "", "²", "4.0", "gpus"])
def test_nproc_per_node_is_checked_before_torchrun_sees_it(value):
    with pytest.raises(ConfigError) as err:
        parse("--nproc-per-node", value, "t.py")
    assert str(err.value) == f"--nproc-per-node: {value!r} is not a worker count; {NPROC_FIX}"


@pytest.mark.parametrize("value", ["1", "8", "1024", "auto", "cpu"])
def test_nproc_per_node_takes_what_torchrun_takes(value):
    assert parse("--nproc-per-node", value, "t.py").torchrun_argv == ["--nproc-per-node", value, "t.py"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_nproc_per_node_gpu_without_a_gpu_is_one_line():
    # torchrun itself raises ValueError("Cuda is not available.") at start.
    with pytest.raises(ConfigError, match=r"^--nproc-per-node: 'gpu' but torch sees no CUDA GPU here; "):
        parse("--nproc-per-node", "gpu", "t.py")


def test_a_rendezvous_port_with_no_port_above_it_for_the_collector_is_refused():
    # The collector listens on the rendezvous port + 1; 65536 it would refuse at start.
    with pytest.raises(ConfigError, match=r"^--master-port/--rdzv-endpoint: port 65535 leaves no port"):
        parse("--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port", "65535", "t.py")
    assert parse("--nnodes", "2", "--master-port", "65534", "t.py").collector_listen() == "127.0.0.1:65535"
    assert parse("--nnodes", "2", "--master-port", "65535", "--collector", "h:1", "t.py").collector == "h:1"
    with pytest.raises(ConfigError, match=r"^--master-addr/--rdzv-endpoint: '\[::1' is not a host the "):
        parse("--nnodes", "2", "--rdzv-endpoint", "[::1:5000", "t.py")
    # A port int() reads but the collector's parser does not: was a ValueError traceback.
    assert parse("--nnodes", "2", "--rdzv-endpoint", "h:²", "t.py").rdzv_port == 29400


@pytest.fixture
def scripts(tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "pkg").mkdir()
    tool = tmp_path / "run.sh"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tmp_path


@pytest.mark.parametrize("argv, problem", [
    (["train.py"], None),
    (["python", "-u", "train.py"], None),
    (["pkg"], None),                                     # a directory with __main__.py: python's call
    (["-m", "no.such.module"], None),                    # modules are left to python
    (["python", "-m", "no.such.module"], None),
    (["--no-python", "sh", "-c", "true"], None),
    (["--no-python", "./run.sh"], None),
    (["missing.py"], "training script 'missing.py' does not exist (in {cwd}); check the path"),
    (["python3", "missing.py", "--lr", "1"], "training script 'missing.py' does not exist (in {cwd}); check the path"),
    (["--run-path", "missing.py"], "training script 'missing.py' does not exist (in {cwd}); check the path"),
    (["--no-python", "no-such-command"], "--no-python: 'no-such-command' is not a command on PATH"),
    (["--no-python", "./train.py"], "--no-python: './train.py' is not an executable file (in {cwd})"),
])
def test_the_script_is_checked_in_every_form(scripts, argv, problem):
    got = runner.script_problem(parse(*argv), cwd=str(scripts))
    assert got == (problem.format(cwd=scripts) if problem else None)


def test_a_collector_that_would_refuse_the_launchers_arguments_stops_the_launch(tmp_path, capsys):
    # No option reaches this any more; should one ever, it is one line and exit 2,
    # not a job without hang detection.
    (tmp_path / "t.py").write_text("")
    config = parse("--timeline-path", str(tmp_path / "tl"), "--rdzv-id", "refused", str(tmp_path / "t.py"))
    config = dataclasses.replace(config, hang_timeout_s=float("inf"))
    assert runner.run(config) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["xpu_timer_launch: the collector would refuse what the launcher passes it "
                   "(--hang-timeout: 'infs' is not a duration; use e.g. 300, 30s or 5m); "
                   "this is a bug in xpu-diag, please report it"]
    assert collector_proc.argv_problem(dataclasses.replace(config, hang_timeout_s=30.0)) is None


# -- the real CLI --

TRAIN = "import pathlib, sys\npathlib.Path(sys.argv[1]).write_text('ran')\n"


def launch(tmp_path, args, env=None, timeout=60):
    """The real launcher on a script that would write ``ran``; (result, ran?)."""
    (tmp_path / "train.py").write_text(TRAIN)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("XPU_TIMER_")}
    full_env.update(env or {})
    # forked with torch imported (tests/preloaded.py), as every launch of the tests
    result = preloaded.run(launcher() + ["--timeline-path", str(tmp_path / "tl"), *args], tmp_path, full_env,
                           timeout)
    return result, (tmp_path / "ran").exists()


@pytest.mark.parametrize("args, env, line", [
    # 1: accepted as inf by the launcher, refused ('infs') by the collector, job went on.
    (["--hang-timeout", "1e400"], {}, "--hang-timeout: '1e400' is too long; at most 8760h (a year)"),
    # 3: torchrun's 34-line ValueError traceback.
    (["--nproc-per-node", "abc"], {}, f"--nproc-per-node: 'abc' is not a worker count; {NPROC_FIX}"),
    # 5: the tracer and the hook took "abc" as their default, in silence.
    ([], {"XPU_TIMER_RING_CAPACITY": "abc"}, "XPU_TIMER_RING_CAPACITY: 'abc' is not a whole number; use e.g. 4096"),
])
def test_bad_values_are_one_line_and_exit_2_before_any_worker(tmp_path, args, env, line):
    result, ran = launch(tmp_path, ["--nproc-per-node", "1", *args, "train.py", str(tmp_path / "ran")], env)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"xpu_timer_launch: {line}\n")
    assert not ran and not (tmp_path / "tl").exists()     # nothing started, not even the collector


def test_a_missing_script_is_one_line_before_the_collector_starts(tmp_path):
    # 4: 27 lines, the collector's start-up among them, then python's complaint.
    result, _ = launch(tmp_path, ["--nproc-per-node", "1", "python", "missing.py"])
    assert (result.returncode, result.stderr) == (
        2, f"xpu_timer_launch: training script 'missing.py' does not exist (in {tmp_path}); check the path\n")
    assert not (tmp_path / "tl").exists()


def test_a_collector_that_cannot_start_with_its_settings_stops_the_launch(tmp_path):
    # Its port (rendezvous port + 1) is taken: the collector says so and exits 2,
    # and the launcher stops there rather than train without hang detection.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result, ran = launch(tmp_path, [
            "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port",
            str(port - 1), "--nproc-per-node", "1", "train.py", str(tmp_path / "ran")])
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and not ran, result.stderr
    assert lines[-2].startswith(f"python -m diag.collector: error: --listen: cannot bind '127.0.0.1:{port}'")
    assert lines[-1] == ("xpu_timer_launch: the collector exited at start with status 2 (its line "
                         "above); no worker was started")
    assert "without hang detection" not in result.stderr
