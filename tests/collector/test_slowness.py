"""The collector's SLOW path without processes: --slow-action report and dump."""

import json
import os

from diag.collector.config import Config
from diag.collector.events import EventStore
from diag.collector.servicer import AgentSession, SessionRegistry
from diag.collector.slowness import SlowWatch
from diag.collector.state import Snapshot
from diag.pb import collector_pb2 as pb
from diag.slow.api import RULE_SLOW_GPU, CommWindow, RankWindow, SlowEvent, SlowFinding


def _window(rank, tflops):
    comm = CommWindow(0, '"default"', "ncclAllReduce", 600, 3.0, 0.005, 300e9, 64e6)
    return RankWindow(rank, 0, rank, "h", 60.0, tflops, 200, 2e12, (comm,), 100, 0.0, 1e4)


def _watch(tmp_path, action):
    config = Config(job_id="job1", token="t", timeline_path=str(tmp_path), slow_action=action)
    registry, said = SessionRegistry(4), []
    session = AgentSession(0, "h", 1)
    registry.add(session)
    events = EventStore(config)
    return SlowWatch(config, events, registry, said.append), events, session, said


def _event():
    windows = {0: _window(0, 790.0), 1: _window(1, 612.0), 2: _window(2, 785.0)}
    finding = SlowFinding(RULE_SLOW_GPU, (1,), 612.0, 787.5, "TFLOP/s",
                          "GEMM 612 TFLOP/s vs job median 788 (-22%)")
    return SlowEvent(finding, since=10.0, declared=40.0, windows=(windows,))


def test_report_writes_slow_json_and_one_line(tmp_path):
    watch, events, session, said = _watch(tmp_path, "report")
    watch._declare(_event(), Snapshot(40.0, 3, {}, {}), 1.7e9)
    [line] = said
    assert line.startswith("SLOW: rank 1 (node 0, local rank 1) GEMM 612 TFLOP/s vs job median 788 (-22%) over 60 s")
    [(event_id, doc)] = watch.declared
    path = tmp_path / "job1" / event_id / "slow.json"
    assert json.loads(path.read_text())["verdict"] == line and doc["held_s"] == 30.0
    assert [r["rank"] for r in doc["per_rank"]] == [0, 1, 2]
    assert not session.commands and events.events() == []    # no stacks asked for


def test_dump_asks_for_the_slow_and_one_healthy_rank_and_takes_their_stacks(tmp_path):
    watch, events, session, said = _watch(tmp_path, "dump")
    watch._declare(_event(), Snapshot(40.0, 3, {}, {}), 1.7e9)
    [command] = session.commands
    assert list(command.dump_stacks.ranks) == [0, 1]
    [event] = events.events()
    name = events.accept_upload(pb.StackDump(job_id="job1", event_id=event.event_id, rank=1, world_size=3,
                                             format=pb.StackDump.FORMAT_PYSPY_JSON, content=b"[]", last=True),
                                41.0)
    event.flush(41.0, force=True)
    doc = json.loads((tmp_path / "job1" / event.event_id / "slow.json").read_text())
    assert doc["rule"] == "slow_gpu" and doc["dumps"] == {"1": [name]} and doc["dumps_missing"] == [0]
    assert not os.path.exists(tmp_path / "job1" / event.event_id / "hang.json")
