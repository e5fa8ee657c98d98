"""The agent with real parts: regions written by RecordWriter, real child
processes, real py-spy, and the real collector on loopback."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from diag.agent import dumps
from diag.agent.agent import Agent
from diag.agent.config import AgentConfig
from diag.agent.sampler import Sampler
from diag.agent.state import NodeState
from diag.common.net import free_port
from diag.records import format as fmt
from diag.records.writer import RecordWriter
from tests.waiting import wait_for

SLEEPER = os.path.join(os.path.dirname(__file__), "..", "scripts", "sleeper.py")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def children():
    started = []

    def start(seconds=120):
        proc = subprocess.Popen([sys.executable, SLEEPER, str(seconds)], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline().strip() == "READY"
        started.append(proc)
        return proc
    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def writer_for(shm, pid, rank=0, world=1):
    return RecordWriter(str(shm), producer=fmt.PRODUCER_PYTHON, rank=rank, local_rank=rank,
                        world_size=world, pid=pid)


def test_sampler_reads_only_descendants_and_cleans_up_after_exit(tmp_path, children):
    child = children()
    mine = writer_for(tmp_path, child.pid, rank=0, world=3)
    writer_for(tmp_path, 1, rank=1, world=3)              # init: not ours
    (tmp_path / "junk.ring").write_bytes(b"not a region")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()                 # a worker that exited before the sampler's first look
    writer_for(tmp_path, gone.pid, rank=2, world=3)
    logs = []
    state = NodeState()
    sampler = Sampler(str(tmp_path), state, os.getpid(), logs.append)
    mine.start(fmt.KIND_COLLECTIVE, "all_reduce", seq=1)
    sampler.sample()
    sampler.sample()
    assert list(state.ranks) == [0]
    assert state.report()[0].oldest_in_flight.name == "all_reduce"
    assert sum("not one of this launcher's workers" in line for line in logs) == 1
    assert not any(f"pid {gone.pid} " in line for line in logs), logs   # not a stranger
    assert sum("junk.ring" in line for line in logs) == 1   # said once, not every pass
    # The worker writes its last record and exits: read once more, then removed.
    mine.end(1, fmt.KIND_COLLECTIVE, "all_reduce", duration_ns=5, seq=1)
    child.kill()
    child.wait()
    sampler.sample()
    [rank] = state.report()
    assert not rank.alive and [s.name for s in rank.stats] == ["all_reduce"]
    assert not os.path.exists(mine.path)


def test_py_spy_dump_of_a_live_process(children):
    child = children()
    files = dumps.dump(child.pid, timeout=60, tools=("py-spy",))
    assert [f for f, _ in files] == [dumps.FMT.FORMAT_PYSPY_JSON]
    assert b"sleeping_in_here" in files[0][1]


def test_dump_of_a_gone_process_is_an_error_file(children):
    child = children()
    child.kill()
    child.wait()
    [(kind, text)] = dumps.dump(child.pid, timeout=30, tools=("py-spy",))
    assert kind == dumps.FMT.FORMAT_ERROR_TEXT and b"gone" in text


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to an unprivileged user")
def test_ptrace_refusal_says_what_to_do(children):
    child = children()
    code = ("import os, sys; from diag.agent import dumps; os.setgid(65534); os.setuid(65534); "
            f"sys.stdout.write(dumps.dump({child.pid}, 30, tools=('py-spy',))[-1][1].decode())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert "SYS_PTRACE" in out.stdout and "run the launcher as root" in out.stdout, out
    assert "ptrace_scope" in out.stdout


def collector(port, timeline, action="report", timeout_s=1.5):
    from diag.collector.config import Config
    from diag.collector.server import create_server
    server, _ = create_server(f"127.0.0.1:{port}", Config(
        job_id="agenttest", token="secret", timeline_path=str(timeline),
        hang_timeout_s=timeout_s, hang_action=action))
    server.start()
    return server


def agent_for(shm, port, token="secret"):
    return Agent(AgentConfig(shm_dir=str(shm), collector=f"127.0.0.1:{port}", token=token,
                             job_id="agenttest", report_interval=0.2, backoff_min=0.1,
                             backoff_max=0.5, dump_tools=("py-spy",)))


def test_agent_connects_late_reports_then_dumps_and_kills_on_a_hang(tmp_path, children, capfd):
    shm, timeline = tmp_path / "shm", tmp_path / "timeline"
    shm.mkdir()
    child = children()
    writer_for(shm, child.pid).start(fmt.KIND_COLLECTIVE, "all_reduce", seq=7)
    port = free_port()
    agent = agent_for(shm, port)
    agent.start()
    server = None
    try:
        # Nobody listens yet: the agent says so, backs off and retries (the
        # report below comes from a retry).
        wait_for(lambda: "unreachable" in capfd.readouterr().err, "the agent's 'unreachable' line", 15)
        server = collector(port, timeline, action="kill")
        wait_for(lambda: 0 in server.state.snapshot(time.monotonic()).ranks, "a report", 15)
        entry = server.state.snapshot(time.monotonic()).ranks[0]
        assert entry.progress.oldest_in_flight.seq == 7 and entry.progress.pid == child.pid
        # The op is older than the 1.5 s timeout: hang -> DumpStacks -> KillWorkers.
        wait_for(lambda: glob.glob(str(timeline / "agenttest" / "*" / "rank00000-of-00001.py.json")),
                 "rank 0's stacks", 60)
        path = glob.glob(str(timeline / "agenttest" / "*" / "rank00000-of-00001.py.json"))[0]
        assert b"sleeping_in_here" in open(path, "rb").read()
        assert child.wait(30) == -signal.SIGKILL
    finally:
        agent.stop()
        if server is not None:
            server.stop(0)


def test_agent_with_the_wrong_token_is_refused_and_says_so(tmp_path, capfd):
    port = free_port()
    server = collector(port, tmp_path / "timeline")
    agent = agent_for(tmp_path, port, token="wrong")
    agent.start()
    try:
        # With the handshake the collector cannot prove the agent's (wrong)
        # token: the line names both causes and nothing is sent.
        wait_for(lambda: "its job token differs" in capfd.readouterr().err, "the refusal", 15)
        assert server.state.reports == 0
    finally:
        agent.stop()
        server.stop(0)


def test_stop_sends_a_last_report_with_the_workers_final_state(tmp_path, children):
    shm = tmp_path / "shm"
    shm.mkdir()
    child = children()
    writer_for(shm, child.pid).start(fmt.KIND_COLLECTIVE, "all_reduce", seq=1)
    port = free_port()
    server = collector(port, tmp_path / "timeline", timeout_s=300)
    agent = Agent(AgentConfig(shm_dir=str(shm), collector=f"127.0.0.1:{port}", token="secret",
                              job_id="agenttest", report_interval=60))   # one report, then the last
    agent.start()
    try:
        wait_for(lambda: 0 in server.state.snapshot(time.monotonic()).ranks, "a report", 15)
        assert server.state.snapshot(time.monotonic()).ranks[0].progress.alive
        child.kill()
        child.wait()
        began = time.monotonic()
        agent.stop()
        assert time.monotonic() - began < 5
        last = server.state.snapshot(time.monotonic()).ranks[0].progress
        assert not last.alive and not last.HasField("oldest_in_flight")
        assert server.state.reports == 2
    finally:
        server.stop(0)
