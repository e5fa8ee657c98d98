"""Issue 21: hangs survive the collector going away. Real parts: a real agent
(diag.agent.Agent) reading a region written by RecordWriter for a live child
process, the real collector on loopback, stopped and started again on the
same port while the child's op stays in flight."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from diag.agent.agent import Agent
from diag.agent.config import AgentConfig
from diag.collector.config import Config
from diag.collector.server import create_server
from diag.common.net import free_port
from diag.records import format as fmt
from diag.records.writer import RecordWriter
from tests.waiting import wait_for

SLEEPER = os.path.join(os.path.dirname(__file__), "..", "scripts", "sleeper.py")
TIMEOUT_S = 4.0
pytestmark = pytest.mark.timeout(120)


def _collector(port: int, timeline) -> object:
    server, _ = create_server(f"127.0.0.1:{port}", Config(
        job_id="scaletest", token="secret", timeline_path=str(timeline), hang_timeout_s=TIMEOUT_S,
        eval_interval_s=0.1))
    server.start()
    return server


def test_agent_reconnects_after_the_collector_restarts_and_the_hang_is_not_lost(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    child = subprocess.Popen([sys.executable, SLEEPER, "120"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "READY"
    port = free_port()
    first = _collector(port, tmp_path / "timeline")
    agent = Agent(AgentConfig(shm_dir=str(shm), collector=f"127.0.0.1:{port}", token="secret",
                              job_id="scaletest", report_interval=0.2, backoff_min=0.1, backoff_max=0.5,
                              dump_tools=("py-spy",)))
    second = None
    try:
        stalled_at = time.monotonic()
        RecordWriter(str(shm), producer=fmt.PRODUCER_PYTHON, rank=0, local_rank=0, world_size=1,
                     pid=child.pid).start(fmt.KIND_COLLECTIVE, "all_reduce", seq=7)
        agent.start()
        wait_for(lambda: 0 in first.state.snapshot(time.monotonic()).ranks, "a report to the first collector", 15)
        first.stop(grace=0).wait(5)       # well before the op is TIMEOUT_S old
        assert not first.watchdog.declared
        gone_for = time.monotonic()
        second = _collector(port, tmp_path / "timeline")
        wait_for(lambda: 0 in second.state.snapshot(time.monotonic()).ranks, "the agent back on the new one", 15)
        entry = second.state.snapshot(time.monotonic()).ranks[0]
        # The op's age comes from the agent: the new collector does not start counting afresh.
        assert entry.progress.oldest_in_flight.seq == 7
        assert entry.progress.oldest_in_flight.age_ns * 1e-9 >= gone_for - stalled_at - 0.05
        wait_for(lambda: second.watchdog.declared, "the HANG on the new collector", 30)
        late = second.watchdog.declared[0].declared - (stalled_at + TIMEOUT_S)
        assert -0.3 <= late <= 2.0, f"HANG {late:+.2f} s after the op crossed the timeout"
    finally:
        agent.stop()
        for server in (first, second):
            if server is not None:
                server.stop(grace=0).wait(5)
        child.kill()
        child.wait()
