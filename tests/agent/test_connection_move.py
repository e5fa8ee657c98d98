"""Issue 21: an agent told to report through its relay (RelayVia) loses no
report on the way. At 12,500 agents the collector is seconds behind while the
whole job moves to the relays: reports it has not read yet sit in its
transport, and a stream cancelled to move drops them (217 of 972,811 in one
device run). Real gRPC servers on loopback: the collector reads slowly and
says RelayVia after the third report; the relay reads at once."""

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


class _Server(pb_grpc.CollectorServicer):
    """Reads every report (its ``report_seq``), ``read_s`` apart; the
    collector's first stream says ``say`` after its third report."""

    def Hello(self, request_iterator, context):   # the handshake (diag/common/handshake.py)
        return answer_hello("t", context)

    def __init__(self, read_s: float, say: pb.Command | None = None) -> None:
        self.read_s, self.say = read_s, say
        self.read: list[int] = []
        self.ended: list[str] = []   # how each stream ended: "eof" or "cancelled"

    def Connect(self, request_iterator, context):
        for report in request_iterator:
            self.read.append(report.report_seq)
            if self.say is not None and len(self.read) == 3:
                say, self.say = self.say, None
                yield say
            time.sleep(self.read_s)
        self.ended.append("eof")


class _Agent:
    def __init__(self) -> None:
        self.said: list[str] = []
        self.stopping = threading.Event()
        self.built = 0

    def log(self, message, every=60.0):
        self.said.append(message)

    def build_report(self, with_perf=True):
        self.built += 1
        return pb.NodeReport(job_id="j", node_rank=3, report_seq=self.built)

    def submit(self, command):
        pass


def _serve(servicer: _Server) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(4))
    pb_grpc.add_CollectorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def test_an_agent_moving_to_its_relay_loses_no_report_the_collector_had_not_read(tmp_path):
    relay = _Server(read_s=0.0)
    relay_server, relay_address = _serve(relay)
    # Reports every 20 ms, read every 150 ms: when RelayVia comes, several
    # reports are written to the collector and not yet read.
    collector = _Server(read_s=0.15, say=pb.Command(relay_via=pb.RelayVia(address=relay_address, perf_every=1)))
    collector_server, collector_address = _serve(collector)
    agent = _Agent()
    conn = Connection(AgentConfig(shm_dir=str(tmp_path), collector=collector_address, token="t", job_id="j",
                                  report_interval=0.02), agent)
    thread = threading.Thread(target=conn.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while len(relay.read) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        via = conn.via
    finally:
        agent.stopping.set()
        conn.close()
        thread.join(10)
        collector_server.stop(0)
        relay_server.stop(0)
    assert not thread.is_alive()
    assert len(relay.read) >= 20 and via == relay_address, (len(relay.read), agent.said)
    assert collector.ended == ["eof"], collector.ended   # ended by the agent's half-close, not cancelled
    assert len(collector.read) > 1, collector.read        # reports were in flight when it moved
    # Every report the agent built up to the relay's last one was read by one
    # side or the other, in order: none fell between the streams.
    both = collector.read + relay.read
    assert both == list(range(1, both[-1] + 1)), (collector.read, relay.read[:5])
    assert not [m for m in agent.said if "unreachable" in m or "failed" in m], agent.said
