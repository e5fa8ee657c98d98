"""parse_args unit tests and ``python -m diag.collector`` as a real subprocess."""

import os
import signal
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from diag.common import handshake
from diag.collector.config import ConfigError, check_timeline_writable, parse_args
from diag.collector.server import create_server

ENV = {"XPU_TIMER_JOB_TOKEN": "tok"}
BASE = ["--job-id", "job1"]


def test_defaults_and_durations_parse():
    config = parse_args(BASE + ["--hang-timeout", "5m", "--silent-after", "2500ms", "--max-dump-size", "1M"], ENV)
    assert (config.hang_timeout_s, config.silent_after_s, config.max_dump_bytes) == (300.0, 2.5, 1 << 20)
    assert (config.listen, config.hang_action, config.token, config.timeline_path) == (
        "127.0.0.1:0", "report", "tok", "/root/timeline")


def test_job_id_is_sanitized_for_paths():
    assert parse_args(["--job-id", "../a b/c"], ENV).safe_job_id == "..abc"
    with pytest.raises(ConfigError, match="--job-id"):
        parse_args(["--job-id", "../.."], ENV)


@pytest.mark.parametrize("argv, env, option", [
    (["--hang-timeout", "soon"], ENV, "--hang-timeout"),
    (["--hang-timeout", "0"], ENV, "--hang-timeout"),
    (["--silent-after", "-1s"], ENV, "--silent-after"),
    (["--hang-action", "reboot"], ENV, "--hang-action"),
    (["--listen", "nohost"], ENV, "--listen"),
    (["--listen", "h:99999"], ENV, "--listen"),
    (["--max-dump-size", "lots"], ENV, "--max-dump-size"),
    (["--max-agents", "many"], ENV, "--max-agents"),
    (["--max-agents", "3000000000"], ENV, "--max-agents: '3000000000' is too large; at most 65536"),
    (["--max-dump-size", "1e400"], ENV, "--max-dump-size: '1e400' is too large; at most 1G"),
    (["--stats-interval", "1e30"], ENV, "--stats-interval: '1e30' is too long; at most 8760h"),
    ([], {}, "XPU_TIMER_JOB_TOKEN"),
    ([], {"XPU_TIMER_JOB_TOKEN": "a\nb"}, "XPU_TIMER_JOB_TOKEN: character 2 ('\\n') cannot travel in gRPC"),
])
def test_bad_options_raise_one_line_naming_the_option(argv, env, option):
    with pytest.raises(ConfigError) as err:
        parse_args(BASE + argv, env)
    assert option in str(err.value) and "\n" not in str(err.value)


def test_unwritable_timeline_path_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="--timeline-path"):
        check_timeline_writable(str(blocker / "sub"))
    check_timeline_writable(str(tmp_path / "new" / "dir"))
    assert (tmp_path / "new" / "dir").is_dir()
    # os.access says yes on /proc (for root, and the tests run as root); writing says no.
    with pytest.raises(ConfigError, match="--timeline-path: cannot write in '/proc'"):
        check_timeline_writable("/proc")


def test_busy_port_is_a_one_line_error(tmp_path):
    config = parse_args(BASE + ["--timeline-path", str(tmp_path)], ENV)
    first, port = create_server("127.0.0.1:0", config)
    try:
        with pytest.raises(ConfigError, match="--listen: cannot bind"):
            create_server(f"127.0.0.1:{port}", config)
    finally:
        first.stop(0)


def test_address_file_that_cannot_be_written_at_serve_time_stops_the_server(tmp_path):
    """main() checks --address-file first; serve() itself (the race, or an API caller)
    must still end in one ConfigError (main prints it as one line), not a traceback."""
    from diag.collector.server import serve
    target = tmp_path / "addr"
    target.mkdir()                       # a directory where the file should go
    config = parse_args(BASE + ["--timeline-path", str(tmp_path / "tl"), "--address-file", str(target),
                                "--listen", "127.0.0.1:0"], ENV)
    with pytest.raises(ConfigError, match="^--address-file: cannot write .*give a file path"):
        serve(config)
    assert os.listdir(tmp_path) == ["addr"] and os.listdir(target) == []   # no temp file left behind


def run_cli(args, env, timeout=60):
    return subprocess.run([sys.executable, "-m", "diag.collector", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, env, needle", [
    (BASE + ["--hang-timeout", "abc"], ENV, "--hang-timeout: 'abc' is not a duration"),
    # Before: 28-line OverflowError tracebacks from grpc's channel arguments.
    (BASE + ["--max-dump-size", "1e30"], ENV, "--max-dump-size: '1e30' is too large; at most 1G (one gRPC message)"),
    (BASE + ["--max-dump-size", "4G"], ENV, "--max-dump-size: '4G' is too large; at most 1G (one gRPC message)"),
    (BASE, {"XPU_TIMER_JOB_TOKEN": ""}, "XPU_TIMER_JOB_TOKEN"),
    (["--hang-timeout", "1"], ENV, "--job-id"),
    (BASE + ["--timeline-path", "/proc/1/nope"], ENV, "--timeline-path"),
    (BASE + ["--address-file", "/"], ENV, "--address-file: '/' is a directory"),
    (BASE + ["--address-file", "/proc/1/nope/addr"], ENV, "--address-file: directory '/proc/1/nope'"),
])
def test_cli_bad_input_prints_one_line_and_exits_2(args, env, needle):
    result = run_cli(args, env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("python -m diag.collector: error: ") and needle in lines[0]


def test_cli_binds_port_0_writes_address_file_and_stops_on_sigterm(tmp_path):
    address_file = tmp_path / "run" / "collector.addr"
    address_file.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "diag.collector", "--listen", "127.0.0.1:0", "--job-id", "j",
                             "--timeline-path", str(tmp_path / "tl"), "--address-file", str(address_file),
                             "--hang-timeout", "30s"], env={**os.environ, **ENV},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        address = address_file.read_text().strip()
        host, port = address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        assert os.listdir(address_file.parent) == ["collector.addr"]  # no temp file left behind
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), metadata=handshake.session_metadata(channel, "tok", address), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert f"serving job j on {address}" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
