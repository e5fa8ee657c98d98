"""The collector's timeline side over real gRPC on loopback: CollectTimeline
on a hang and on demand, uploads and their validation, agents that do not answer."""

import concurrent.futures
import contextlib
import json

import grpc
import pytest

from diag.pb import collector_pb2 as pb
from diag.pb import collector_pb2_grpc as pb_grpc
from diag.records import format as fmt
from diag.timeline import wire
from diag.timeline.api import RankMeta, RankSnapshot, Span
from tests.collector.conftest import TOKEN
from tests.collector.fakes import FakeAgent, minted_session, node_report, rank_progress
from tests.collector.test_collector_service import stalled
from tests.timeline.trace_check import check
from tests.waiting import wait_for

S = 1_000_000_000
META = minted_session(TOKEN)


@pytest.fixture
def agents():
    made = []
    yield lambda address: made.append(FakeAgent(address, TOKEN)) or made[-1]
    for agent in made:
        agent.close(clean=False)


def answer(request_id, node, ranks, world=4, job_id="job1"):
    """A TimelineUpload as an agent builds it: one all_reduce per rank."""
    snaps = [RankSnapshot(RankMeta(r, r % 2, world, 1000 + r),
                          [Span(S, 2 * S, "all_reduce", fmt.KIND_COLLECTIVE, fmt.PRODUCER_PYTHON, 0,
                                0, 7, 64, 0)], [], 0) for r in ranks]
    return wire.build_upload(snaps, offset_ns=10 * S, job_id=job_id, request_id=request_id,
                             node_rank=node, hostname=f"n{node}", window_ns=30 * S)


def reports(agent, node, ranks, world=4):
    return agent.report_every(0.2, lambda: node_report(node, [rank_progress(r, world) for r in ranks]))


@contextlib.contextmanager
def two_nodes(start_collector, agents):
    """A collector, agent ``a`` reporting node 0 (ranks 0-1) and agent ``b``
    node 1 (ranks 2-3), both registered; yields them, a Collector stub on its
    own channel and a one-thread pool to call it from. The reports stop after."""
    server, address = start_collector()
    a, b = agents(address), agents(address)
    stops = [reports(a, 0, (0, 1)), reports(b, 1, (2, 3))]
    wait_for(lambda: len(server.registry) == 2, "two agents connected", 10)
    try:
        with grpc.insecure_channel(address) as channel, concurrent.futures.ThreadPoolExecutor(1) as pool:
            yield a, b, pb_grpc.CollectorStub(channel), pool
    finally:
        for stop in stops:
            stop.set()


def test_on_demand_merges_every_agents_answer(start_collector, agents):
    with two_nodes(start_collector, agents) as (a, b, stub, pool):
        future = pool.submit(stub.GetTimeline, pb.TimelineRequest(last_ns=60 * S, wait_ms=8000),
                             metadata=META, timeout=30)
        for agent, node, ranks in ((a, 0, (0, 1)), (b, 1, (2, 3))):
            request = agent.next_command("collect_timeline").collect_timeline
            assert request.last_ns == 60 * S and request.request_id.startswith("on-demand-")
            ack = agent.stub.UploadTimeline(answer(request.request_id, node, ranks), metadata=META)
            assert ack.ok and ack.message == "2 spans"
        reply = future.result()
    assert (reply.ranks, list(reply.nodes_missing)) == (4, [])
    tracks = check(json.loads(reply.trace_json))
    assert sorted(pid for pid, _ in tracks) == [1, 2, 3, 4]


def test_an_agent_that_does_not_answer_is_listed_and_the_rest_still_comes(start_collector, agents):
    with two_nodes(start_collector, agents) as (a, b, stub, pool):
        future = pool.submit(stub.GetTimeline, pb.TimelineRequest(wait_ms=1500), metadata=META,
                             timeout=30)
        request = a.next_command("collect_timeline").collect_timeline
        a.stub.UploadTimeline(answer(request.request_id, 0, (0, 1)), metadata=META)
        reply = future.result()
        # Too late: the request is closed.
        with pytest.raises(grpc.RpcError) as late:
            b.stub.UploadTimeline(answer(request.request_id, 1, (2, 3)), metadata=META)
    assert late.value.code() == grpc.StatusCode.NOT_FOUND
    assert (reply.ranks, list(reply.nodes_missing)) == (2, [1])
    assert json.loads(reply.trace_json)["otherData"]["nodes_missing"] == [1]


def test_a_hang_writes_timeline_json_into_its_event_directory(start_collector, agents, tmp_path):
    server, address = start_collector()
    agent = agents(address)
    stop = agent.report_every(0.2, stalled)
    event_id = agent.next_command("dump_stacks").dump_stacks.event_id
    request = agent.next_command("collect_timeline").collect_timeline
    assert request.request_id == event_id and request.last_ns == 0
    agent.stub.UploadTimeline(answer(event_id, 0, range(4)), metadata=META)
    path = tmp_path / "timeline" / "job1" / event_id / "timeline.json"
    wait_for(path.exists, "timeline.json")
    stop.set()
    doc = json.loads(path.read_text())
    assert len(check(doc)) == 4 and doc["otherData"]["request"] == event_id
    # the path is listed once the write is done: just after the file appears
    wait_for(lambda: server.timelines.written == [str(path)], "the written timeline listed")


@pytest.mark.parametrize("change, code", [
    (dict(request_id="never-issued"), grpc.StatusCode.NOT_FOUND),
    (dict(job_id="other-job"), grpc.StatusCode.INVALID_ARGUMENT),
    (dict(world=2), grpc.StatusCode.INVALID_ARGUMENT),   # rank 3 of a world of 2
])
def test_bad_uploads_are_refused(start_collector, agents, change, code):
    server, address = start_collector()
    agent = agents(address)
    stop = agent.report_every(0.2, stalled)
    event_id = agent.next_command("dump_stacks").dump_stacks.event_id
    # The request is issued after the stacks are asked for (DumpStacks goes first,
    # at once): an upload before it would be refused as never issued.
    assert agent.next_command("collect_timeline").collect_timeline.request_id == event_id
    stop.set()
    args = dict(request_id=event_id, world=4, job_id="job1")
    args.update(change)
    with pytest.raises(grpc.RpcError) as refused:
        agent.stub.UploadTimeline(answer(args["request_id"], 0, range(4), world=args["world"],
                                         job_id=args["job_id"]), metadata=META)
    assert refused.value.code() == code


def test_uploads_need_the_job_token(start_collector):
    _, address = start_collector()
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.CollectorStub(channel)
        for call, msg in ((stub.UploadTimeline, answer("x", 0, [0])),
                          (stub.GetTimeline, pb.TimelineRequest())):
            with pytest.raises(grpc.RpcError) as refused:
                call(msg, metadata=minted_session("wrong"), timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_collector_stopping_before_the_answers_writes_what_it_has(start_collector, agents, tmp_path):
    server, address = start_collector()
    agent = agents(address)
    stop = agent.report_every(0.2, stalled)
    event_id = agent.next_command("dump_stacks").dump_stacks.event_id
    # The timeline request goes out just after DumpStacks: stopping before it is
    # issued would find no agent connected (a CI run did), not one that did not answer.
    agent.next_command("collect_timeline")
    stop.set()
    server.stop(grace=0).wait(5)   # no agent answered; the 10 s deadline is far off
    doc = json.loads((tmp_path / "timeline" / "job1" / event_id / "timeline.json").read_text())
    check(doc)
    assert doc["otherData"]["nodes_missing"] == [0] and "no agent answered" in doc["otherData"]["error"]
