"""--ingest-procs (docs/collector.md "Ingest processes"): the agents' streams
live in the ingest processes, the judge holds none and binds no public port,
an ingest process that dies is replaced and its agents reconnect, and an address that cannot be bound is one line. (Every service test
in test_collector_service.py also runs through the relay.)"""

import os
import signal
import socket

import grpc
import pytest

from diag.collector.config import Config
from diag.collector.server import create_server
from diag.common.options import ConfigError
from tests.collector.conftest import TOKEN
from tests.collector.fakes import FakeAgent, node_report, rank_progress
from tests.waiting import wait_for


def report(node):
    return node_report(node, [rank_progress(8 * node + r, 96, started=5, completed=5) for r in range(8)])


def test_streams_live_in_the_ingest_processes_and_a_dead_one_is_replaced(start_collector, capsys):
    server, address = start_collector(ingest_procs=2, hang_timeout_s=30.0)
    assert server.relay.links == 2 and len(server.ingest.procs) == 2
    # The judge listens on its link socket only: the public port is the ingest processes'.
    owners = _listening(int(address.rsplit(":", 1)[1]))
    assert len(owners) == 2, owners                               # two sockets on the port, SO_REUSEPORT
    assert not owners & _my_socket_inodes(), "the judge holds the public port"
    agents = [FakeAgent(address, TOKEN) for _ in range(12)]
    stops = [agent.report_every(0.5, lambda node=node: report(node)) for node, agent in enumerate(agents)]
    try:
        wait_for(lambda: len(server.registry) == 12, "12 agents registered through the relays", 30)
        old = [p.pid for p in server.ingest.procs]
        for pid in old:   # every agent's stream is in one of them
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: all(a.error is not None for a in agents), "every agent's stream ending with its process", 30)
        wait_for(lambda: not set(old) & {p.pid for p in server.ingest.procs} and server.relay.links == 2,
                 "two new ingest processes, linked", 30)
        assert len(server.registry) == 0                              # the judge closed every relayed stream
        again = [FakeAgent(address, TOKEN) for _ in agents]           # the agents reconnect
        stops += [agent.report_every(0.5, lambda node=node: report(node)) for node, agent in enumerate(again)]
        agents += again
        wait_for(lambda: len(server.registry) == 12, "every node back", 30)
        assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith(("HANG", "SILENT"))]
    finally:
        for stop in stops:
            stop.set()
        for agent in agents:
            agent.close(clean=False)


def _listening(port: int) -> set[str]:
    """Inodes of the sockets listening on ``port`` (IPv4, or IPv4-mapped IPv6 as gRPC binds)."""
    out = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(name).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[1].endswith(f":{port:04X}"):
                out.add(fields[9])
    return out


def _my_socket_inodes() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def test_an_address_in_use_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = Config(job_id="job1", token=TOKEN, timeline_path=str(tmp_path / "tl"), ingest_procs=2)
        with pytest.raises(ConfigError) as err:
            create_server(f"127.0.0.1:{port}", config)
    assert str(err.value) == (f"--listen: cannot bind '127.0.0.1:{port}' (address in use or not local); "
                              f"pick another HOST:PORT")
