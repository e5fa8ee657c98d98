"""Issue 21: a stream whose reports gRPC stops taking is ended and opened
again. At 12,500 agents a fifth of the streams opened in the connection storm
never had a report read: their agents waited on the write for good, and the
collector never heard of them. A real gRPC server on loopback that never
reads its first stream; the agent's second stream is read."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc

from diag.agent.config import AgentConfig
from diag.agent.connection import Connection
from diag.pb import collector_pb2 as pb
from diag.pb import collector_pb2_grpc as pb_grpc
from tests.collector.fakes import answer_hello

BIG = "h" * 200_000   # a report this big fills the transport's windows in a few writes


class _Collector(pb_grpc.CollectorServicer):
    def Hello(self, request_iterator, context):   # the handshake (diag/common/handshake.py)
        return answer_hello("t", context)

    def __init__(self) -> None:
        self.streams = 0
        self.read: list[int] = []   # stream number of each report read

    def Connect(self, request_iterator, context):
        self.streams += 1
        stream = self.streams
        if stream == 1:   # takes the stream and never reads it
            while context.is_active():
                time.sleep(0.05)
            return
        for _ in request_iterator:
            self.read.append(stream)
        yield from ()


class _Agent:
    def __init__(self) -> None:
        self.said: list[str] = []
        self.stopping = threading.Event()

    def log(self, message, every=60.0):
        self.said.append(message)

    def build_report(self, with_perf=True):
        return pb.NodeReport(job_id="j", node_rank=3, hostname=BIG)

    def submit(self, command):
        pass


def _run(tmp_path, collector: _Collector, interval: float, stalled_write_s: float):
    """A real server for ``collector`` and a Connection streaming to it on a thread."""
    server = grpc.server(futures.ThreadPoolExecutor(4), options=[("grpc.max_receive_message_length", 1 << 24)])
    pb_grpc.add_CollectorServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    agent = _Agent()
    conn = Connection(AgentConfig(shm_dir=str(tmp_path), collector=f"127.0.0.1:{port}", token="t", job_id="j",
                                  report_interval=interval), agent)
    conn.stalled_write_s = stalled_write_s
    thread = threading.Thread(target=conn.run, daemon=True)
    thread.start()

    def stop() -> None:
        agent.stopping.set()
        conn.close()
        thread.join(10)
        server.stop(0)
        assert not thread.is_alive()
    return port, agent, stop


def test_a_stream_that_takes_no_report_is_ended_and_opened_again(tmp_path):
    collector = _Collector()
    port, agent, stop = _run(tmp_path, collector, interval=0.01, stalled_write_s=1.0)
    try:
        deadline = time.monotonic() + 30
        while collector.read.count(2) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert collector.read.count(2) >= 3, (collector.streams, collector.read, agent.said)
        assert collector.streams == 2 and 1 not in collector.read, (collector.streams, agent.said)
        stuck = [m for m in agent.said if "took no report" in m]
        assert stuck == [f"the collector at 127.0.0.1:{port} took no report for 1 s: the stream is stuck; "
                         f"connecting again"], agent.said
    finally:
        stop()


def test_a_healthy_stream_is_never_called_stuck(tmp_path):
    """Reports taken as fast as they come, for several times stalled_write_s."""
    collector = _Collector()
    collector.streams = 1   # every stream is read
    _, agent, stop = _run(tmp_path, collector, interval=0.05, stalled_write_s=0.5)
    try:
        time.sleep(3.0)
    finally:
        stop()
    assert collector.streams == 2 and len(collector.read) >= 20, (collector.streams, len(collector.read))
    assert not [m for m in agent.said if "took no report" in m], agent.said
