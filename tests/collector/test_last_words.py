"""Last words and --hang-action recover over real gRPC on loopback (issue 19):
every HANG asks every agent to persist its newest snapshot, and a kill waits
for their answers (bounded), so no worker dies before its state is on disk."""

import json
import time

import grpc
import pytest

from diag.pb import collector_pb2 as pb
from tests.collector.fakes import wait_ticks
from tests.collector.test_collector_service import agents, dump, healthy, stalled  # noqa: F401  (agents: fixture)
from tests.waiting import wait_for

WAIT = 30.0


def answer(agent, event_id, *, node=0, ok=True, step=36, message=""):
    return agent.stub.ReportLastWords(pb.LastWordsDone(job_id="job1", event_id=event_id, node_rank=node, ok=ok,
                                                       step=step, message=message, hostname="n0"),
                                      metadata=agent.metadata, timeout=10)


def upload_all(agent, event_id):
    for rank in range(4):
        agent.upload(dump(event_id, rank))


def test_every_hang_asks_for_last_words_even_when_it_only_reports(start_collector, agents, capsys):
    server, address = start_collector()        # --hang-action report
    agent = agents(address)
    stop = agent.report_every(0.2, stalled)
    words = agent.next_command("persist_last_words").persist_last_words
    stop.set()
    event_id = server.watchdog.declared[0].event_id
    assert words.event_id == event_id
    answer(agent, event_id, step=36)
    deadline = time.monotonic() + WAIT
    while "LAST WORDS" not in capsys.readouterr().err and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.watchdog.declared[0].last_words_said
    assert server.watchdog.declared[0].last_words_line() == f"LAST WORDS: event {event_id}: 1 node(s) on disk at step 36"


@pytest.mark.parametrize("action, said", [("report", False), ("kill", False), ("recover", True)])
def test_last_words_with_no_snapshot_anywhere_are_said_only_when_recovery_was_asked_for(
        start_collector, agents, capsys, action, said):
    server, address = start_collector(hang_action=action, dump_timeout_s=120.0)
    agent = agents(address)
    stop = agent.report_every(0.2, stalled)
    event_id = agent.next_command("persist_last_words").persist_last_words.event_id
    stop.set()
    answer(agent, event_id, step=-1, message="recovery is off on this node (no snapshot store or persist directory)")
    deadline = time.monotonic() + WAIT
    while not server.watchdog.declared[0].last_words_said and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.watchdog.declared[0].last_words_said
    assert ("LAST WORDS" in capsys.readouterr().err) is said


def stacks_in_before_a_kill(start_collector, agents, last_words_timeout_s):
    """A collector with --hang-action kill and one agent reporting a stall,
    whose stacks are all uploaded: returns the server, the agent, what stops
    its reports, and the hang's event id."""
    server, address = start_collector(hang_action="kill", dump_timeout_s=120.0,
                                      last_words_timeout_s=last_words_timeout_s)
    agent = agents(address)
    stop = agent.report_every(0.2, stalled)
    event_id = agent.next_command("dump_stacks").dump_stacks.event_id
    upload_all(agent, event_id)
    return server, agent, stop, event_id


def test_kill_waits_for_the_last_words_after_the_stacks_are_in(start_collector, agents):
    server, agent, stop, event_id = stacks_in_before_a_kill(start_collector, agents, 120.0)
    event = server.watchdog.declared[0]
    wait_for(lambda: event.stacks_said, "the STACKS line")   # every dump came with last=True: no quiet wait
    wait_ticks(server.watchdog, 2)   # the kill rule looked again with the stacks in
    assert not event.killed          # still no kill without the last words
    answer(agent, event_id)
    kill = agent.next_command("kill_workers", timeout=WAIT).kill_workers
    stop.set()
    assert kill.reason == f"hang {event_id}: --hang-action kill" and not kill.recover


def test_kill_goes_ahead_at_the_last_words_deadline(start_collector, agents):
    _, agent, stop, event_id = stacks_in_before_a_kill(start_collector, agents, 1.0)
    kill = agent.next_command("kill_workers", timeout=WAIT)     # no answer ever came
    stop.set()
    assert event_id in kill.kill_workers.reason


def test_recover_kill_carries_the_hang_time_the_nodes_and_the_node_blamed_on_hardware(start_collector, agents):
    server, address = start_collector(hang_action="recover", dump_timeout_s=120.0)
    node0, node1 = agents(address), agents(address)
    stop0 = node0.report_every(0.2, stalled)
    stop1 = node1.report_every(0.2, lambda: pb.NodeReport(job_id="job1", node_rank=1, hostname="gpu-7",
                                                             agent_pid=4242, report_seq=1))
    event_id = node0.next_command("dump_stacks").dump_stacks.event_id
    event = server.watchdog.declared[0]
    assert event.last_words_expected == {0, 1}
    # The hardware verdict names node 1 in a fault list next to hang.json (by hostname).
    with open(f"{event.path}/faults.json", "w") as f:
        json.dump({"version": 1, "tool": "test", "created_unix": time.time(),
                   "faulty": [{"node": "gpu-7", "reason": "XID 79 on its GPU", "hostname": "gpu-7"}]}, f)
    upload_all(node0, event_id)
    answer(node0, event_id, node=0)
    answer(node1, event_id, node=1, ok=False, step=-1, message="disk full")
    kill = node1.next_command("kill_workers", timeout=WAIT).kill_workers
    stop0.set()
    stop1.set()
    assert kill.recover and kill.nodes == 2 and list(kill.leave_out_nodes) == [1]
    assert kill.declared_unix == pytest.approx(json.load(open(f"{event.path}/hang.json"))["declared_unix"], abs=1e-3)
    assert kill.reason == f"hang {event_id}: --hang-action recover"
    assert event.last_words_line() == (f"LAST WORDS: event {event_id}: 1 node(s) on disk at step 36; "
                                       f"node 1: disk full")


def test_a_healthy_job_under_recover_is_never_asked_for_last_words(start_collector, agents):
    server, address = start_collector(hang_action="recover", hang_timeout_s=1.0)   # --hang-timeout's floor
    agent = agents(address)
    stop = agent.report_every(0.1, healthy)
    began = time.monotonic()
    wait_for(lambda: time.monotonic() - began >= 3.0 and server.state.reports >= 10, "three hang timeouts of reports")
    wait_ticks(server.watchdog, 2, full=True)   # ... all judged
    stop.set()
    assert server.watchdog.declared == []
    assert agent.commands.empty()


def test_last_words_for_an_unknown_event_or_job_are_refused(start_collector, agents):
    _, address = start_collector()
    agent = agents(address)
    with pytest.raises(grpc.RpcError) as err:
        answer(agent, "../../etc")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    stop = agent.report_every(0.2, stalled)
    event_id = agent.next_command("persist_last_words").persist_last_words.event_id
    stop.set()
    with pytest.raises(grpc.RpcError) as err:
        agent.stub.ReportLastWords(pb.LastWordsDone(job_id="other", event_id=event_id),
                                   metadata=agent.metadata, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("entry, blamed", [
    ({"node": "vm#1", "reason": "XID 79", "hostname": "vm", "node_rank": 1}, [1]),   # the collector's own faults.json
    ({"node": "vm", "reason": "netcheck: slow link", "hostname": "vm"}, [0, 1]),      # no node rank: the hostname
    ({"node": "other", "reason": "XID 79", "hostname": "other", "node_rank": 0}, [0]),
])
def test_a_fault_entry_with_a_node_rank_blames_that_node_only_where_hostnames_repeat(tmp_path, entry, blamed):
    """Two launchers on one host (or a cluster whose nodes share a hostname):
    an entry that carries the job's node rank names that node, not every node
    of its hostname; only an entry without one falls back to the hostname."""
    from types import SimpleNamespace

    from diag.collector.watchdog import blamed_nodes
    (tmp_path / "faults.json").write_text(json.dumps({"version": 1, "tool": "test", "created_unix": time.time(),
                                                      "faulty": [entry]}))
    snap = SimpleNamespace(agents={0: SimpleNamespace(hostname="vm"), 1: SimpleNamespace(hostname="vm")})
    assert blamed_nodes(str(tmp_path), snap, [0, 1]) == blamed
