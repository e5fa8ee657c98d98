"""The collector over real gRPC on loopback: token, health, hang -> dumps -> event dir, kill, validation."""

import json
import os
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from diag.pb import collector_pb2 as pb
from tests.collector.conftest import TOKEN
from tests.collector.fakes import ALL_REDUCE, FakeAgent, node_report, rank_progress, session, wait_ticks
from tests.waiting import wait_for

WAIT = 30.0


def stalled(age_s=1.5, world=4, pid_base=1000):
    """Ranks 0,1,3 in all_reduce (group "default" (ranks 0-3), seq 41) for ``age_s``; rank 2 idle at seq 40."""
    ranks = [rank_progress(r, world, pid=pid_base + r, op=ALL_REDUCE, age_s=age_s, seq=41, started=41, completed=40)
             for r in (0, 1, 3)]
    ranks.insert(2, rank_progress(2, world, pid=pid_base + 2, started=40, idle_s=age_s))
    return node_report(0, ranks)


def healthy(world=4):
    return node_report(0, [rank_progress(r, world, started=50, completed=50) for r in range(world)])


def dump(event_id, rank, *, world=4, fmt=pb.StackDump.FORMAT_PYSPY_JSON, content=b"[]", last=True):
    return pb.StackDump(job_id="job1", event_id=event_id, node_rank=0, hostname="n0", rank=rank, world_size=world,
                        pid=1000 + rank, format=fmt, content=content, last=last)


@pytest.fixture(params=[0, 2], ids=["one-process", "ingest-procs"])
def start_collector(request, start_collector):
    """Every test twice: the collector alone, and with --ingest-procs 2, where
    each agent's stream and upload goes through an ingest process's relay
    (diag/collector/ingest.py, ingest_link.py) and the judge holds none."""
    return lambda **config: start_collector(**{"ingest_procs": request.param, **config})


@pytest.fixture
def agents():
    made = []

    def make(address, token=TOKEN, metadata=None):
        agent = FakeAgent(address, token, metadata)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.close(clean=False)


def health_check(address, metadata):
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""),
                                                         metadata=metadata, timeout=10)


@pytest.mark.parametrize("token", [None, "wrong", "raw"], ids=["no-token", "wrong-token", "raw-token"])
def test_every_rpc_without_the_right_token_is_unauthenticated(start_collector, agents, token):
    """No credential, one made with the wrong token, or the token itself in
    the clear (as before issue 33: no longer a credential)."""
    _, address = start_collector()
    metadata = (("x-xpu-diag-token", TOKEN),) if token == "raw" else session(address, token)
    with pytest.raises(grpc.RpcError) as err:
        health_check(address, metadata)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    agent = agents(address, None, metadata)
    with pytest.raises(grpc.RpcError) as err:
        agent.upload(dump("x", 0))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    agent.send(healthy())
    assert agent.commands.get(timeout=WAIT) is None  # the stream was refused
    assert agent.error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "x-xpu-diag-session" in agent.error.details()


def test_health_service_answers_serving_with_the_token(start_collector):
    _, address = start_collector()
    reply = health_check(address, session(address, TOKEN))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_stalled_rank_gets_dumps_event_dir_and_verdict(start_collector, agents, capsys, tmp_path):
    server, address = start_collector()
    agent = agents(address)
    stop = agent.report_every(0.2, stalled)
    command = agent.next_command("dump_stacks")
    event_id = command.dump_stacks.event_id
    assert list(command.dump_stacks.ranks) == []  # every rank on the node
    event_dir = tmp_path / "timeline" / "job1" / event_id
    wait_for((event_dir / "hang.json").exists, "hang.json")
    first = json.loads((event_dir / "hang.json").read_text())  # written before any dump arrived
    assert first["hung_ranks"] == [0, 1, 3] and first["culprits"] == [2] and first["dumps"] == {}
    for rank in range(4):
        content = json.dumps([{"pid": 1000 + rank, "frames": ["stall" if rank == 2 else "all_reduce"]}]).encode()
        ack = agent.upload(dump(event_id, rank, content=content))
        assert ack.ok and ack.message == f"rank{rank:05d}-of-00004.py.json"
    agent.upload(dump(event_id, 2, fmt=pb.StackDump.FORMAT_GDB_TEXT, content=b"#0 nanosleep"))
    stop.set()
    doc = wait_for(lambda: (d := json.loads((event_dir / "hang.json").read_text()))["dumps_missing"] == [] and d,
                   "hang.json listing every dump")
    assert doc["dumps"]["2"] == ["rank00002-of-00004.gdb.txt", "rank00002-of-00004.py.json"]
    assert (doc["job_id"], doc["event_id"], doc["world_size"], doc["timeout_s"]) == ("job1", event_id, 4, 1.0)
    assert doc["never_entered"] == [{"rank": 2, "op": "all_reduce", "comm_id": 0, "group": "default", "seq": 41,
                                     "last_started_seq": 40}]
    assert [r["op"] for r in doc["ranks"]] == ["all_reduce", "all_reduce", None, "all_reduce"]
    assert json.loads((event_dir / "rank00002-of-00004.py.json").read_text())[0]["frames"] == ["stall"]
    assert (event_dir / "rank00002-of-00004.gdb.txt").read_bytes() == b"#0 nanosleep"
    assert not [n for n in os.listdir(event_dir) if n.endswith(".tmp")]
    hang_lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("HANG: ")]
    assert hang_lines == [doc["verdict"]]
    assert hang_lines[0].startswith("HANG: ranks 0-1,3 in all_reduce (group \"default\" (ranks 0-3), seq 41) for ")
    assert (f"rank 2 not in any collective (at seq 40 on group \"default\"); rule timeout: in flight past "
            f"--hang-timeout 1 s; stacks in {event_dir}/") in hang_lines[0]
    assert doc["rule"] == {"name": "timeout", "evidence": "in flight past --hang-timeout 1 s"}
    assert len(server.watchdog.declared) == 1  # fired once although the reports kept coming


def test_hang_fires_again_only_after_progress_resumed(start_collector, agents, tmp_path):
    server, address = start_collector()
    agent = agents(address)
    stop = agent.report_every(0.2, stalled)
    first = agent.next_command("dump_stacks").dump_stacks.event_id
    seen = server.state.reports
    wait_for(lambda: server.state.reports >= seen + 2, "two more stalled reports")
    wait_ticks(server.watchdog, 2, full=True)   # ... judged by the rules
    assert len(server.watchdog.declared) == 1
    stop.set()
    stop = agent.report_every(0.2, healthy)
    wait_for(lambda: server.watchdog.hang.detector.armed, "re-arm after progress resumed")
    stop.set()
    stop = agent.report_every(0.2, lambda: stalled(pid_base=2000))
    second = agent.next_command("dump_stacks").dump_stacks.event_id
    stop.set()
    assert first != second and len(server.watchdog.declared) == 2
    assert sorted(os.listdir(tmp_path / "timeline" / "job1")) == sorted([first, second])


def test_kill_action_sends_kill_workers_once_the_dumps_are_in(start_collector, agents):
    _, address = start_collector(hang_action="kill", dump_timeout_s=120.0)
    agent = agents(address)
    stop = agent.report_every(0.2, stalled)
    event_id = agent.next_command("dump_stacks").dump_stacks.event_id
    for rank in range(4):
        agent.upload(dump(event_id, rank))
    agent.stub.ReportLastWords(pb.LastWordsDone(job_id="job1", event_id=event_id, node_rank=0, ok=True, step=-1),
                               metadata=agent.metadata, timeout=10)   # the kill waits for them too (test_last_words.py)
    kill = agent.next_command("kill_workers")
    stop.set()
    assert event_id in kill.kill_workers.reason


def test_kill_action_kills_after_the_dump_deadline_without_dumps(start_collector, agents):
    _, address = start_collector(hang_action="kill", dump_timeout_s=1.0, last_words_timeout_s=1.0)
    agent = agents(address)
    stop = agent.report_every(0.2, stalled)
    event_id = agent.next_command("dump_stacks").dump_stacks.event_id
    kill = agent.next_command("kill_workers", timeout=WAIT)  # no dump was uploaded
    stop.set()
    assert kill.kill_workers.reason == f"hang {event_id}: --hang-action kill"


def test_upload_validation_refuses_bad_rank_world_format_size_and_unknown_event(start_collector, agents, tmp_path):
    _, address = start_collector(max_dump_bytes=1024)
    agent = agents(address)
    with pytest.raises(grpc.RpcError) as err:
        agent.upload(dump("20261122T000000Z", 0))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    stop = agent.report_every(0.2, stalled)
    event_id = agent.next_command("dump_stacks").dump_stacks.event_id
    stop.set()
    refused = {
        "../../etc": (dump("../../etc", 0), grpc.StatusCode.NOT_FOUND),
        "rank 4": (dump(event_id, 4), grpc.StatusCode.INVALID_ARGUMENT),
        "rank -1": (dump(event_id, -1), grpc.StatusCode.INVALID_ARGUMENT),
        "world": (dump(event_id, 0, world=8), grpc.StatusCode.INVALID_ARGUMENT),
        "format": (dump(event_id, 0, fmt=pb.StackDump.FORMAT_UNSPECIFIED), grpc.StatusCode.INVALID_ARGUMENT),
        "size": (dump(event_id, 0, content=b"x" * 1025), grpc.StatusCode.RESOURCE_EXHAUSTED),
        "job": (pb.StackDump(job_id="other", event_id=event_id, rank=0, world_size=4, format=1),
                grpc.StatusCode.INVALID_ARGUMENT),
    }
    for what, (request, code) in refused.items():
        with pytest.raises(grpc.RpcError) as err:
            agent.upload(request)
        assert err.value.code() == code, what
    assert sorted(os.listdir(tmp_path / "timeline" / "job1" / event_id)) == ["hang.json"]


def test_bad_report_and_wrong_job_abort_the_stream(start_collector, agents):
    _, address = start_collector()
    bad = agents(address)
    bad.send(node_report(0, [rank_progress(5, 4)]))
    assert bad.commands.get(timeout=WAIT) is None
    assert bad.error.code() == grpc.StatusCode.INVALID_ARGUMENT and "rank 5" in bad.error.details()
    other = agents(address)
    other.send(node_report(0, [rank_progress(0, 4)], job_id="someone-else"))
    assert other.commands.get(timeout=WAIT) is None
    assert other.error.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_agent_that_stops_reporting_turns_silent_unless_its_workers_exited(start_collector, agents, capsys):
    server, address = start_collector(silent_after_s=0.5)
    finished, broken = agents(address), agents(address)
    done = node_report(0, [rank_progress(r, 4) for r in (0, 1)])
    for p in done.ranks:
        p.alive = False  # the workers exited: the agent's last report says so
    finished.send(done)
    broken.send(node_report(1, [rank_progress(r, 4) for r in (2, 3)]))
    wait_for(lambda: len(server.state.snapshot(time.monotonic()).ranks) == 4, "both agents' ranks")
    finished.close(clean=True)
    broken.close(clean=False)
    err = wait_for(lambda: (e := capsys.readouterr().err) and "SILENT:" in e and e, "the silent line")
    assert [line for line in err.splitlines() if line.startswith("SILENT:")] == [
        line for line in err.splitlines() if line.startswith("SILENT: ranks 2-3 on node 1 (n1): agent sent no report")]
    wait_ticks(server.watchdog, 2, full=True)   # the silent rule judged again, twice
    assert "SILENT" not in capsys.readouterr().err  # announced once


def test_agents_beyond_max_agents_are_refused(start_collector, agents):
    server, address = start_collector(max_agents=1)
    first, second = agents(address), agents(address)
    first.send(node_report(0, [rank_progress(0, 2)]))
    wait_for(lambda: len(server.registry) == 1, "the first agent's session")
    second.send(node_report(1, [rank_progress(1, 2)]))
    assert second.commands.get(timeout=WAIT) is None
    assert second.error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-agents" in second.error.details()


def test_a_report_read_while_ingest_is_held_waits_for_the_hold_to_end(start_collector, agents):
    """The declaring tick holds ingest (registry.hold): every stream has a read
    pending, so the report that read returns must wait too, not be ingested
    against the tick for the GIL (at 12,500 nodes the relays' one message
    each was 6,000 reports; docs/collector.md)."""
    server, address = start_collector(hang_timeout_s=60.0)
    agent = agents(address)
    agent.send(node_report(0, [rank_progress(0, 2, started=5)]))
    wait_for(lambda: server.state.reports == 1, "the first report", 10)
    server.registry.hold(True)
    gate = server.registry.gate
    wait_for(lambda: not gate.is_set(), "the loop to clear the gate", 10)
    # asyncio.Event's waiters: none yet (the stream, or the relay link, waits
    # in its read); one once the report is read and parked by the hold. The
    # report is in the collector's hands, not just on the wire, when judged.
    assert not gate._waiters
    agent.send(node_report(0, [rank_progress(0, 2, started=6)], seq=2))
    wait_for(lambda: len(gate._waiters) == 1, "the report read and parked at the gate", 10)
    assert server.state.reports == 1, "a report was ingested while the hold was on"
    server.registry.hold(False)
    wait_for(lambda: server.state.reports == 2, "the held report, once the hold ends", 10)
