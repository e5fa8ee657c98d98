"""--nodes-per-relay (docs/collector.md "Report relays"). Real parts: the
collector on loopback, four real agents (diag.agent.Agent, node ranks 0-3)
each reading a record region written for a live child process, the relays
they start (python -m diag.collector.ingest), real py-spy for the stacks.

Two relays form (nodes 0-1, 2-3) and every agent reports through one; a
relay killed with SIGKILL: its agents report directly at once, one of them
serves a new relay, and nothing is declared on the healthy job. A hang
through the relays: the HANG line on time and every rank's stacks, the
DumpStacks having gone down through the relays."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from diag.agent.agent import Agent
from diag.agent.config import AgentConfig
from diag.collector import servicer
from diag.collector.config import Config
from diag.collector.relay_board import PERF_EVERY
from diag.collector.server import create_server
from diag.common.options import ConfigError
from diag.records import format as fmt
from diag.records.writer import RecordWriter
from tests.collector.fakes import wait_ticks
from tests.waiting import poll_until, wait_for

SLEEPER = os.path.join(os.path.dirname(__file__), "..", "scripts", "sleeper.py")
NODES, WORLD = 4, 4
TOKEN = "relaytoken"
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def job(tmp_path, monkeypatch):
    """start(hang_timeout_s) -> (server, agents, writers); one rank a node,
    each with an all_reduce (seq 7) started and ended."""
    # A directly reporting agent is advised every 0.5 s (2 s in the product):
    # the relays form, and re-form after the kill, in a quarter of the wait;
    # what the advice says is the same.
    monkeypatch.setattr(servicer, "ADVISE_EVERY_S", 0.5)
    made = {"children": [], "agents": [], "servers": []}

    def start(hang_timeout_s: float):
        server, port = create_server("127.0.0.1:0", Config(
            job_id="relayjob", token=TOKEN, timeline_path=str(tmp_path / "timeline"),
            hang_timeout_s=hang_timeout_s, eval_interval_s=0.1, nodes_per_relay=2))
        server.start()
        made["servers"].append(server)
        writers = []
        for node in range(NODES):
            child = subprocess.Popen([sys.executable, SLEEPER, "300"], stdout=subprocess.PIPE, text=True)
            made["children"].append(child)
            assert child.stdout.readline().strip() == "READY"
            shm = tmp_path / f"shm{node}"
            shm.mkdir()
            writer = RecordWriter(str(shm), producer=fmt.PRODUCER_PYTHON, rank=node, local_rank=0,
                                  world_size=WORLD, pid=child.pid)
            op = writer.start(fmt.KIND_COLLECTIVE, "all_reduce", seq=7)
            writer.end(op, fmt.KIND_COLLECTIVE, "all_reduce", duration_ns=1000, seq=7)
            writers.append(writer)
            agent = Agent(AgentConfig(shm_dir=str(shm), collector=f"127.0.0.1:{port}", token=TOKEN,
                                      job_id="relayjob", node_rank=node, local_world_size=1,
                                      report_interval=0.2, backoff_min=0.1, backoff_max=0.5,
                                      dump_tools=("py-spy",)))
            made["agents"].append(agent)
            agent.start()
        return server, made["agents"], writers

    yield start
    # Side by side: each serving agent's stop waits for its relay to send
    # what it holds and exit, a second or so each.
    stopping = [threading.Thread(target=agent.stop) for agent in made["agents"]]
    for thread in stopping:
        thread.start()
    for thread in stopping:
        thread.join()
    for server in made["servers"]:
        server.stop(grace=0).wait(5)
    for child in made["children"]:
        child.kill()
        child.wait()


def _all_relayed(server, agents) -> bool:
    return (server.servicer.relays.linked == 2 and server.relay.links == 2 and len(server.registry) == NODES
            and all(a.connection.via is not None for a in agents))


def test_relays_form_and_a_killed_one_is_replaced_with_no_verdict(job, capfd):
    server, agents, _ = job(hang_timeout_s=30.0)
    wait_for(lambda: _all_relayed(server, agents), "two relays linked, every agent reporting through one", 60)
    served = [a for a in agents if a.connection.relay.pid is not None]
    assert len(served) == 2 and {a.config.node_rank // 2 for a in served} == {0, 1}   # one per group
    vias = {a.config.node_rank: a.connection.via for a in agents}
    assert vias[0] == vias[1] != vias[2] == vias[3]
    # The perf window with one report in 5, once each agent's stream through the relay is open
    wait_for(lambda: all(a.connection.perf_every == PERF_EVERY for a in agents), "every agent at the relay's pace", 15)
    reports = server.state.reports
    wait_for(lambda: server.state.reports >= reports + 4 * NODES, "reports coming in through the relays", 10)

    victim = served[0]
    group = victim.config.node_rank // 2
    os.kill(victim.connection.relay.pid, signal.SIGKILL)
    wait_for(lambda: all(a.connection.via is None for a in agents if a.config.node_rank // 2 == group),
             "the killed relay's agents reporting directly", 15)
    wait_for(lambda: _all_relayed(server, agents), "a new relay for the group, every agent through one again", 60)
    assert {a.connection.via for a in agents if a.config.node_rank // 2 == group} != {vias[victim.config.node_rank]}
    reports = server.state.reports   # two rounds of reports through the new relay, judged by the rules
    wait_for(lambda: server.state.reports >= reports + 2 * NODES, "reports through the new relay", 10)
    wait_ticks(server.watchdog, 2, full=True)
    assert not server.watchdog.declared
    err = capfd.readouterr().err
    assert not [line for line in err.splitlines() if line.startswith(("HANG", "SILENT", "OVERLOAD"))], err
    assert f"the report relay at {vias[victim.config.node_rank]} failed" in err   # said once by each of its agents


def test_a_hang_through_the_relays_is_declared_on_time_with_every_ranks_stacks(job, tmp_path):
    # The ranks stall once every agent reports through a relay, so the whole
    # wait runs through the relays (was: stalled from the start, with a 10 s
    # timeout to cover the relays forming on a loaded machine); 3 s: three
    # times the relays' urgent age (a report with an op in flight that long
    # goes up at once).
    timeout = 3.0
    server, agents, writers = job(hang_timeout_s=timeout)
    wait_for(lambda: _all_relayed(server, agents), "every agent reporting through a relay", 60)
    assert not server.watchdog.declared
    stalled_at = time.monotonic()   # before the op starts: it is no older than this
    for writer in writers:
        writer.start(fmt.KIND_COLLECTIVE, "all_reduce", seq=8)
    wait_for(lambda: server.watchdog.declared, "the HANG", 30)
    late = server.watchdog.declared[0].declared - (stalled_at + timeout)
    assert -0.3 <= late <= 2.0, f"HANG {late:+.2f} s after the op crossed the timeout"
    # DumpStacks went down through the relays; the dumps came back to the collector.
    wait_for(lambda: len(glob.glob(str(tmp_path / "timeline" / "**" / "rank*-of-00004.py.json"),
                                   recursive=True)) == WORLD, "every rank's py-spy dump", 60)
    assert all(a.connection.via is not None for a in agents)


def test_relays_and_ingest_processes_are_one_or_the_other(tmp_path):
    with pytest.raises(ConfigError, match="--ingest-procs 2 and --nodes-per-relay 32: choose one"):
        Config(job_id="j", token=TOKEN, timeline_path=str(tmp_path), ingest_procs=2, nodes_per_relay=32)


def _relay_by_hand(tmp_path, batch_s: float, stderr=None):
    """A collector under --nodes-per-relay 2 and a relay of group 0 started
    by hand with this batch window: (server, the relay process, its port file)."""
    server, port = create_server("127.0.0.1:0", Config(
        job_id="job1", token=TOKEN, timeline_path=str(tmp_path / "timeline"), hang_timeout_s=60.0,
        eval_interval_s=0.1, nodes_per_relay=2))
    server.start()
    port_file = tmp_path / "relay.port"
    relay = subprocess.Popen([sys.executable, "-m", "diag.collector.ingest", "--listen", "127.0.0.1:0",
                              "--link", f"127.0.0.1:{port}", "--group", "0", "--max-agents", "2",
                              "--max-dump-bytes", str(1 << 20), "--batch-s", str(batch_s), "--urgent-s", "1",
                              "--port-file", str(port_file), "--parent-pid", str(os.getpid())],
                             env={**os.environ, "XPU_TIMER_JOB_TOKEN": TOKEN}, stderr=stderr, text=True)
    return server, relay, port_file


def _stop(server, relay, agents) -> None:
    """After a test of a relay started by hand: its agents, the relay, the collector."""
    for agent in agents:
        agent.close(clean=False)
    if relay.poll() is None:
        relay.kill()
    relay.wait(10)
    server.stop(grace=0).wait(5)


def test_a_relay_batches_reports_but_sends_a_stalled_one_at_once(tmp_path):
    """A relay started by hand with a 2 s batch window: a healthy report
    waits for the window, one with an op in flight for 2 s goes up at once
    (under 1.5 s: one that waited for the window would take 2 s)."""
    from tests.collector.fakes import ALL_REDUCE, FakeAgent, node_report, rank_progress
    server, relay, port_file = _relay_by_hand(tmp_path, batch_s=2)
    agent = None
    try:
        wait_for(lambda: server.servicer.relays.linked == 1 and port_file.exists(), "the relay linked", 30)
        agent = FakeAgent(f"127.0.0.1:{port_file.read_text()}", TOKEN)
        sent = time.monotonic()
        agent.send(node_report(0, [rank_progress(0, 2, started=5, completed=5)]))
        wait_for(lambda: server.state.reports == 1, "the healthy report", 15)
        assert time.monotonic() - sent >= 1.5, "a healthy report went up before the batch window ended"
        sent = time.monotonic()
        agent.send(node_report(0, [rank_progress(0, 2, op=ALL_REDUCE, age_s=2.0, seq=6, started=6, completed=5)]))
        wait_for(lambda: server.state.reports == 2, "the stalled report", 15)
        assert time.monotonic() - sent < 1.5, "a stalled op's report waited for the batch window"
        assert len(server.registry) == 1 and not server.watchdog.declared
    finally:
        if agent is not None:
            agent.close(clean=False)
        relay.terminate()
        relay.wait(10)
        server.stop(grace=0).wait(5)


def test_a_relay_stopped_sends_what_it_holds_before_it_exits(tmp_path):
    """SIGTERM (its agent stopping) in the middle of a 30 s batch window: the
    reports it holds reach the collector, the link ends cleanly (no warning)
    and the relay exits 0 well within the window."""
    from tests.collector.fakes import FakeAgent, node_report, rank_progress
    server, relay, port_file = _relay_by_hand(tmp_path, batch_s=30, stderr=subprocess.PIPE)
    agents = []
    try:
        wait_for(lambda: server.servicer.relays.linked == 1 and port_file.exists(), "the relay linked", 30)
        for node in range(2):
            agents.append(FakeAgent(f"127.0.0.1:{port_file.read_text()}", TOKEN))
            agents[-1].send(node_report(node, [rank_progress(node, 2, started=5, completed=5)], seq=1))
        agents[0].send(node_report(0, [rank_progress(0, 2, started=6, completed=6)], seq=2))
        time.sleep(1.0)   # the relay has read them, and holds them for its window
        assert server.state.reports == 0
        stopped = time.monotonic()
        relay.send_signal(signal.SIGTERM)
        assert relay.wait(10) == 0 and time.monotonic() - stopped < 5
        assert server.state.reports == 3
        assert server.state.snapshot(time.monotonic()).ranks[0].progress.comms[0].last_started_seq == 6
        assert "link to the collector ended" not in relay.stderr.read()
        wait_for(lambda: server.servicer.relays.linked == 0, "the collector forgot the relay", 10)
    finally:
        _stop(server, relay, agents)


def test_a_relay_sends_a_streams_newest_plain_report_for_the_older_ones_and_every_perf_window(tmp_path, monkeypatch):
    """Three plain reports of node 0 in one batch (the first with the perf
    window) and one of node 1: the judge reads node 0's first (its window)
    and newest, counts all four, and node 0's rank reads the newest with
    the window of the first (ingest.coalesced)."""
    from tests.collector.fakes import ALL_REDUCE, FakeAgent, node_report, rank_progress
    server, relay, port_file = _relay_by_hand(tmp_path, batch_s=30, stderr=subprocess.PIPE)
    read = []   # each plain report the judge read: how many it stood for
    ingest_digest = server.state.ingest_digest
    monkeypatch.setattr(server.state, "ingest_digest",
                        lambda data, d, *a: read.append(1 + d.superseded) or ingest_digest(data, d, *a))
    agents = []
    try:
        wait_for(lambda: server.servicer.relays.linked == 1 and port_file.exists(), "the relay linked", 30)
        for node in range(2):   # each stream opens with a stalled op's report, which goes up at once
            agents.append(FakeAgent(f"127.0.0.1:{port_file.read_text()}", TOKEN))
            agents[-1].send(node_report(node, [rank_progress(node, 2, op=ALL_REDUCE, age_s=2.0, seq=5, started=5,
                                                             completed=4)], seq=1))
        wait_for(lambda: server.state.reports == 2, "the streams' first reports", 15)
        first = rank_progress(0, 2, started=5, completed=5)
        first.perf.window_s = 10.0
        agents[0].send(node_report(0, [first], seq=2))
        agents[0].send(node_report(0, [rank_progress(0, 2, started=6, completed=6)], seq=3))
        agents[0].send(node_report(0, [rank_progress(0, 2, started=7, completed=7)], seq=4))
        agents[1].send(node_report(1, [rank_progress(1, 2, started=7, completed=7)], seq=2))
        time.sleep(1.0)   # the relay has read them, and holds them for its window
        relay.send_signal(signal.SIGTERM)   # a relay stopped sends what it holds: the batch, now
        assert relay.wait(10) == 0
        assert server.state.reports == 6
        ranks = server.state.snapshot(time.monotonic()).ranks
        assert ranks[0].progress.comms[0].last_started_seq == 7 and ranks[0].perf.window_s == 10.0
        assert ranks[1].progress.comms[0].last_started_seq == 7
        # node 0's report with the window (nothing newer carried one), its newest for the one between; node 1's
        assert sorted(read) == [1, 1, 2], read
    finally:
        _stop(server, relay, agents)


def test_an_agent_that_ignores_the_relay_commands_goes_on_reporting_directly(tmp_path):
    """An agent of an older release: ServeRelay and RelayVia are unknown to it."""
    from tests.collector.fakes import FakeAgent, node_report, rank_progress
    server, port = create_server("127.0.0.1:0", Config(
        job_id="job1", token=TOKEN, timeline_path=str(tmp_path / "timeline"), hang_timeout_s=60.0,
        eval_interval_s=0.1, nodes_per_relay=2))
    server.start()
    agent = FakeAgent(f"127.0.0.1:{port}", TOKEN)
    stop = agent.report_every(0.1, lambda: node_report(1, [rank_progress(1, 2, started=5, completed=5)]))
    try:
        assert agent.next_command("serve_relay", timeout=10).serve_relay.group == 0
        reports = server.state.reports
        wait_for(lambda: server.state.reports >= reports + 10, "reports going on, directly", 10)
        assert agent.error is None and len(server.registry) == 1 and server.servicer.relays.linked == 0
    finally:
        stop.set()
        agent.close(clean=False)
        server.stop(grace=0).wait(5)


def test_a_relay_whose_link_is_refused_says_why_and_exits(tmp_path):
    """A collector that refuses the link (here: it serves no relay links; at
    12,500 agents: it had no call slot left) must not leave a relay waiting for
    agents that will never be sent to it: it says why in one line and exits,
    and the collector asks another agent of the group."""
    server, port = create_server("127.0.0.1:0", Config(
        job_id="job1", token=TOKEN, timeline_path=str(tmp_path / "timeline"), hang_timeout_s=60.0,
        eval_interval_s=0.1))
    server.start()
    relay = subprocess.Popen([sys.executable, "-m", "diag.collector.ingest", "--listen", "127.0.0.1:0",
                              "--link", f"127.0.0.1:{port}", "--group", "3", "--max-agents", "2",
                              "--max-dump-bytes", str(1 << 20), "--parent-pid", str(os.getpid())],
                             env={**os.environ, "XPU_TIMER_JOB_TOKEN": TOKEN}, stderr=subprocess.PIPE, text=True)
    try:
        _, err = relay.communicate(timeout=30)
        lines = [line for line in err.splitlines() if line.strip()]
        assert relay.returncode == 0 and len(lines) == 1, err
        # Without --nodes-per-relay the collector serves no link at all.
        assert lines[0].startswith("xpu_diag relay: ingest process ") and \
            lines[0].endswith(": link to the collector ended: UNIMPLEMENTED Method not found!"), lines[0]
    finally:
        relay.kill()
        relay.wait(10)
        server.stop(grace=0).wait(5)


def test_a_second_relay_of_a_linked_group_is_refused_and_exits(tmp_path):
    """A group asked again (its first relay linked late, in a connection
    storm) must not keep two relays: the second is told which one serves the
    group, says so in one line and exits; the first stays linked."""
    server, port = create_server("127.0.0.1:0", Config(
        job_id="job1", token=TOKEN, timeline_path=str(tmp_path / "timeline"), hang_timeout_s=60.0,
        eval_interval_s=0.1, nodes_per_relay=2))
    server.start()

    def relay() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "diag.collector.ingest", "--listen", "127.0.0.1:0",
                                 "--link", f"127.0.0.1:{port}", "--group", "3", "--max-agents", "2",
                                 "--max-dump-bytes", str(1 << 20), "--parent-pid", str(os.getpid())],
                                env={**os.environ, "XPU_TIMER_JOB_TOKEN": TOKEN}, stderr=subprocess.PIPE, text=True)

    first = relay()
    second = None
    try:
        wait_for(lambda: server.servicer.relays.linked == 1, "the first relay linked", 30)
        serving = server.servicer.relays.advice(6, now=time.monotonic()).relay_via.address
        second = relay()
        _, err = second.communicate(timeout=30)
        lines = [line for line in err.splitlines() if line.strip()]
        assert second.returncode == 0 and len(lines) == 1, err
        assert lines[0].endswith(f": link to the collector ended: ALREADY_EXISTS the relay at {serving} "
                                 f"serves this group already"), lines[0]
        time.sleep(0.5)
        assert first.poll() is None and server.servicer.relays.linked == 1 and server.relay.links == 1
        assert server.servicer.relays.advice(7, now=time.monotonic()).relay_via.address == serving
    finally:
        for p in (first, second):
            if p is not None:
                p.kill()
                p.wait(10)
        server.stop(grace=0).wait(5)


def test_a_relay_whose_collector_stops_first_exits_without_a_traceback(tmp_path):
    """The end of a multi-node job: node 0's collector stops while another
    node's agent still has its stream open to the relay. The relay exits, and
    the stream it cuts on the way is an end, not an error: no traceback."""
    from tests.collector.fakes import FakeAgent, node_report, rank_progress
    server, relay, port_file = _relay_by_hand(tmp_path, batch_s=0.2, stderr=subprocess.PIPE)
    agent = None
    try:
        wait_for(lambda: server.servicer.relays.linked == 1 and port_file.exists(), "the relay linked", 30)
        agent = FakeAgent(f"127.0.0.1:{port_file.read_text()}", TOKEN)
        agent.send(node_report(0, [rank_progress(0, 2, started=5, completed=5)]))
        wait_for(lambda: server.state.reports == 1, "the report through the relay", 15)
        server.stop(grace=0).wait(5)
        assert relay.wait(15) == 0
        said = relay.stderr.read()
        assert "Traceback" not in said and "CancelledError" not in said, said
    finally:
        _stop(server, relay, [agent] if agent is not None else [])


def test_a_relay_stopped_while_the_collector_takes_nothing_says_how_many_reports_it_dropped(tmp_path):
    """SIGTERM while the collector reads nothing (held, as its declaring tick
    holds ingest; at 25,000 agents it was 17 s behind when the agents
    stopped): the relay is cut after DRAIN_S and says how many of the
    reports it read never reached the collector, exactly the ones missing."""
    from diag.collector.ingest import DRAIN_S
    from tests.collector.fakes import ALL_REDUCE, FakeAgent, node_report, rank_progress
    server, relay, port_file = _relay_by_hand(tmp_path, batch_s=30, stderr=subprocess.PIPE)
    agents, held = [], 1500   # 8 ranks a report: ~0.7 MB in one message, far more than the link's window
    try:
        wait_for(lambda: server.servicer.relays.linked == 1 and port_file.exists(), "the relay linked", 30)
        for node in range(2):
            agents.append(FakeAgent(f"127.0.0.1:{port_file.read_text()}", TOKEN))
        server.registry.hold(True)
        time.sleep(0.5)
        # A stalled op's report goes up at once: the collector reads that
        # message, then holds; the link takes nothing more.
        agents[0].send(node_report(0, [rank_progress(0, 2, op=ALL_REDUCE, age_s=2.0, seq=6, started=6, completed=5)]))
        for seq in range(held // 2):
            for node, agent in enumerate(agents):
                ranks = [rank_progress(8 * node + r, 16, started=seq, completed=seq) for r in range(8)]
                ranks[0].dropped_records = 1   # the judge reads each such report (no newer one stands for it)
                agent.send(node_report(node, ranks, seq=seq + 2))
        time.sleep(2.0)   # the relay has read them, and holds them for its window
        stopped = time.monotonic()
        relay.send_signal(signal.SIGTERM)
        assert relay.wait(10) == 0 and DRAIN_S <= time.monotonic() - stopped < DRAIN_S + 3
        server.registry.hold(False)
        said = relay.stderr.read()
        dropped = [int(line.split(": ")[-1].split()[0]) for line in said.splitlines() if "never reached it" in line]
        assert len(dropped) == 1 and f"did not take what it held within {DRAIN_S:g} s" in said, said
        assert dropped[0] > held // 2, said   # the stalled report's message took only what had come with it
        # What the collector read before the hold is ingested; with the
        # dropped, that is every report the agents sent.
        poll_until(lambda: server.state.reports + dropped[0] == held + 1, 10)
        time.sleep(0.5)
        assert server.state.reports + dropped[0] == held + 1, (server.state.reports, dropped)
    finally:
        _stop(server, relay, agents)
