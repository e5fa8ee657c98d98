"""Issue 33, item 2: another user listens on the collector's address first.
The agent must prove the server holds the job token before it sends the
token, a credential, or obeys anything; it says so in one line, and node 1's
launcher stops within seconds instead of waiting for its rendezvous."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from diag.common.net import free_port
from diag.agent.agent import Agent
from diag.agent.config import AgentConfig
from tests.functional.launch import ROOT, SCRIPTS, Launch
from tests.waiting import wait_for

TOKEN = "the-jobs-secret-token-0123456789"
NOBODY = 65534


class Impostor:
    """tests/functional/impostor.py in a subprocess, as nobody when we are root."""

    def __init__(self, port: int = 0):
        uid = [str(NOBODY)] if os.geteuid() == 0 else []
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.functional.impostor", str(port)] + uid,
                                     cwd=ROOT, stdout=subprocess.PIPE, text=True)
        first = json.loads(self.proc.stdout.readline())
        self.port, self.uid = first["port"], first["uid"]
        self.calls: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.calls.append(json.loads(line))

    def received(self) -> str:
        """Everything it was sent, as text (metadata values and bodies' hex)."""
        return json.dumps(self.calls)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self._reader.join(5)
        self.proc.stdout.close()


@pytest.fixture
def impostor():
    made = []
    yield lambda port=0: made.append(Impostor(port)) or made[-1]
    for one in made:
        one.stop()


def assert_nothing_given(impostor: Impostor) -> None:
    assert impostor.calls, "the agent never called the impostor"
    assert {c["method"] for c in impostor.calls} == {"/diag.pb.Collector/Hello"}, impostor.calls
    for c in impostor.calls:
        keys = {k for k, _ in c["metadata"]}
        assert "x-xpu-diag-token" not in keys and "x-xpu-diag-session" not in keys, c
    assert TOKEN not in impostor.received() and TOKEN.encode().hex() not in impostor.received()


def test_agent_gives_an_impostor_nothing_and_obeys_nothing(impostor, tmp_path, capfd):
    fake = impostor()
    if os.geteuid() == 0:
        assert fake.uid == NOBODY
    shm = tmp_path / "shm"
    shm.mkdir()
    agent = Agent(AgentConfig(shm_dir=str(shm), collector=f"127.0.0.1:{fake.port}", token=TOKEN, job_id="j",
                              report_interval=0.2, backoff_min=0.1, backoff_max=0.5, dump_tools=("py-spy",)))
    told = threading.Event()
    agent.on_untrusted = lambda reason: told.set()
    began = time.monotonic()
    agent.start()
    try:
        assert told.wait(10), "the agent did not find the impostor"
        assert time.monotonic() - began < 10
        wait_for(lambda: not agent.connection or not any(
            t.name.endswith("connection") and t.is_alive() for t in agent._threads), "the connection thread to end")
    finally:
        agent.stop()
    assert_nothing_given(fake)
    assert agent.dumped_events == []
    said = [line for line in capfd.readouterr().err.splitlines() if f"127.0.0.1:{fake.port}" in line]
    assert len(said) == 1 and "failed to prove it holds this job's token" in said[0], said


@pytest.mark.timeout(120)
def test_node_one_launcher_stops_fast_when_an_impostor_holds_the_collector_port(impostor, tmp_path):
    port = free_port()
    fake = impostor(port + 1)
    node1 = Launch(["--node-rank", "1", "--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
                    "--master-port", str(port), "--rdzv-id", "impostor", "--timeline-path", str(tmp_path),
                    os.path.join(SCRIPTS, "sleeper.py"), "60"], env={"XPU_TIMER_JOB_TOKEN": TOKEN})
    try:
        began = time.monotonic()
        code = node1.wait(60)
        took = time.monotonic() - began
    finally:
        node1.kill()
    assert code != 0 and took < 30, (code, took, node1.output())
    assert len(node1.matching(r"failed to prove it holds this job's token")) == 1, node1.output()
    assert node1.matching(r"node 1 stopped: the collector address 127\.0\.0\.1:%d is held by a server that is "
                          r"not this job's" % (port + 1)), node1.output()
    assert_nothing_given(fake)
