"""The agent's recovery thread (diag/agent/lastwords.py), one tick at a time,
against a real snapshot store written by a real Checkpointer (one process)."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from diag.agent.config import AgentConfig
from diag.agent.lastwords import Recovery
from diag.agent.state import NodeState
from diag.common.options import Every
from diag.pb import collector_pb2 as pb
from diag.recover import Checkpointer, store


class FakeAgent:
    """What Recovery uses of the Agent: log, lock, state, connection, stopping."""

    def __init__(self):
        self.lines, self.answers = [], []
        self.lock = threading.Lock()
        self.state = NodeState()
        self.stopping = threading.Event()
        self.connection = self

    def log(self, message, every=60.0):
        self.lines.append(message)

    def report_last_words(self, done):
        self.answers.append(done)
        return True


def config(tmp_path, **kw):
    base = dict(shm_dir=str(tmp_path), collector=None, token="t", job_id="j",
                store_dir=kw.pop("store_dir", None), ckpt_dir=str(tmp_path / "ckpt"))
    base.update(kw)
    return AgentConfig(**base)


@pytest.fixture
def snapshots(tmp_path):
    """A store holding one rank's committed snapshot of step 3."""
    path = store.create_store_dir("j", 0, base=str(tmp_path))
    ckpt = Checkpointer(path, str(tmp_path / "ckpt"))
    model = torch.nn.Linear(4, 2)
    ckpt.register(model=model)
    for step in (1, 2, 3):
        ckpt.save(step)
        ckpt.wait(30)
    ckpt.close()
    yield path
    store.remove_store_dir(path)


def test_the_periodic_persist_follows_the_step_schedule(tmp_path, snapshots):
    agent = FakeAgent()
    rec = Recovery(agent, config(tmp_path, store_dir=snapshots, ckpt_persist_every=Every(steps=2)))
    rec.tick(time.monotonic())
    assert rec.last_step == 3
    assert os.path.exists(tmp_path / "ckpt" / "step-00000003" / "rank-00000" / "manifest.json")
    rec.tick(time.monotonic())        # nothing newer: no second persist, nothing said
    assert rec.last_step == 3 and agent.lines == []


def test_last_words_are_persisted_and_answered_with_the_step(tmp_path, snapshots):
    agent = FakeAgent()
    rec = Recovery(agent, config(tmp_path, store_dir=snapshots, ckpt_persist_every=Every(seconds=3600.0)))
    rec.request_last_words("ev1")
    rec.tick(time.monotonic())
    [done] = agent.answers
    assert (done.event_id, done.ok, done.step, done.job_id) == ("ev1", True, 3, "j")
    assert agent.lines[-1].startswith(f"last words for ev1: persisted to {tmp_path / 'ckpt'} in ")


def test_last_words_without_a_store_answer_at_once_and_say_why(tmp_path):
    agent = FakeAgent()
    rec = Recovery(agent, config(tmp_path))
    rec.request_last_words("ev2")
    rec.tick(time.monotonic())
    [done] = agent.answers
    assert done.ok and done.step == -1 and "recovery is off on this node" in done.message


@pytest.mark.parametrize("nodes, leave_out, nnodes_min, leaves", [
    (2, [1], 1, True),      # --nnodes 1:2: the job can go on without node 1
    (2, [1], 2, False),     # --nnodes 2: it cannot; node 1 rejoins
    (3, [0], 1, False),     # another node is blamed
])
def test_a_node_blamed_on_hardware_leaves_only_where_nnodes_allows(tmp_path, nodes, leave_out, nnodes_min, leaves):
    agent, left = FakeAgent(), []
    rec = Recovery(agent, config(tmp_path, node_rank=1, nnodes_min=nnodes_min))
    rec.leave = left.append
    rec.on_kill(pb.KillWorkers(reason="hang ev: --hang-action recover", recover=True, declared_unix=1.0,
                               nodes=nodes, leave_out_nodes=leave_out))
    assert bool(left) == leaves
    if leaves:
        assert left == ["hang ev is blamed on this node's hardware"]
    elif 1 in leave_out:
        assert "fewer than --nnodes min 2: rejoining" in agent.lines[-1]


def test_a_plain_kill_starts_no_restart_clock(tmp_path):
    rec = Recovery(FakeAgent(), config(tmp_path))
    rec.on_kill(pb.KillWorkers(reason="hang ev: --hang-action kill"))
    assert rec._restart is None


def test_a_worker_exit_in_a_job_without_snapshots_writes_and_says_nothing(tmp_path):
    from diag.agent.state import RankState
    path = store.create_store_dir("j", 0, base=str(tmp_path))   # the launcher makes it for every job
    agent = FakeAgent()
    rec = Recovery(agent, config(tmp_path, store_dir=path))
    agent.state.ranks[0] = RankState(0, 0, 1, pid=4242, started_ns=1, last_activity_ns=1)
    rec.tick(time.monotonic())
    agent.state.ranks[0].alive = False     # the worker exited
    rec.tick(time.monotonic())
    assert agent.lines == [] and not os.path.exists(tmp_path / "ckpt")
    assert rec._restart is not None and "rank(s) 0 exited" in rec._restart["what"]   # timed if a restart follows


def test_the_agent_stopping_persists_the_snapshot_no_tick_saw(tmp_path, snapshots):
    """The job's last snapshot is committed as the workers exit; the agent
    may stop before its next tick (a loaded host: CI saw it), and the newest
    step must still reach the disk."""
    agent = FakeAgent()
    rec = Recovery(agent, config(tmp_path, store_dir=snapshots, ckpt_persist_every=Every(seconds=3600.0)))
    agent.stopping.set()
    rec.run()                       # no tick: the loop ends at once
    assert rec.last_step == 3
    assert os.path.exists(tmp_path / "ckpt" / "step-00000003" / "rank-00000" / "manifest.json")
    assert agent.lines[-1].startswith(f"at the job's end: persisted to {tmp_path / 'ckpt'} in ")
    rec.at_the_end()                # nothing newer: nothing written or said again
    assert len(agent.lines) == 1
