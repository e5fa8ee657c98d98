"""Real 2-rank gloo jobs (DDP, FSDP2) killed after a snapshot and restarted:
the restart restores the newest step both ranks have and ends bitwise equal to
an uninterrupted run, from the node's memory or, with the memory gone, from
the persisted copy.

Each kind of crash (mode, and whether the last snapshot was committed) runs
once (``crashed``); every test restarts from a copy of what it left (the
node's store and the persisted copies), so the restarts never see each
other's snapshots."""

from __future__ import annotations

import shutil

import pytest

from diag.recover import layout, store
from diag.recover.persist import persist_newest
from tests.recover import jobs

STEPS, DIE_AT = 9, 5


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    found = {}
    for mode in ("ddp", "fsdp"):
        out = tmp_path_factory.mktemp(f"ref-{mode}")
        done = jobs.run(out, mode, STEPS)
        assert done.returncode == 0, done.stderr[-3000:]
        found[mode] = jobs.params(out)
    return found


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """``crashed(mode, how, tmp_path)`` -> (store, persist dir, persist result):
    a copy, in ``tmp_path``, of what the job killed after step DIE_AT left,
    after the agent's last words. Each (mode, how) job runs once."""
    done = {}

    def crash(mode, how):
        base = tmp_path_factory.mktemp(f"crash-{mode}-{how}")
        node = store.create_store_dir("t", 0, base=str(base))
        persist = str(base / "persist")
        job = jobs.run(base / "a", mode, STEPS, node, persist, die=(DIE_AT, how))
        assert job.returncode != 0
        # the agent's last words: the newest committed snapshot of each local rank to disk
        return node, persist, persist_newest(node, persist)

    def copy(mode, how, tmp_path):
        if (mode, how) not in done:
            done[mode, how] = crash(mode, how)
        node, persist, result = done[mode, how]
        mine = store.create_store_dir("t", 0, base=str(tmp_path))
        shutil.copytree(node, mine, dirs_exist_ok=True)
        shutil.copytree(persist, tmp_path / "persist")
        return mine, str(tmp_path / "persist"), result
    return copy


def _crash_and_restart(tmp_path, crashed, mode, keep_memory: bool, how: str):
    node, persist, result = crashed(mode, how, tmp_path)
    assert result.ok and result.newest_step in (DIE_AT - 1, DIE_AT), result.summary()
    if not keep_memory:      # the node is gone: a new one has an empty store
        store.remove_store_dir(node)
        node = store.create_store_dir("t", 1, base=str(tmp_path))
    again = jobs.run(tmp_path / "b", mode, STEPS, node, persist)
    assert again.returncode == 0, again.stderr[-3000:]
    return again, result


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_process_crash_restores_from_memory(tmp_path, reference, crashed, mode):
    again, persisted = _crash_and_restart(tmp_path, crashed, mode, keep_memory=True, how="wait")
    steps = jobs.restored(tmp_path / "b")
    assert steps[0] == steps[1] and DIE_AT - 1 <= steps[0] <= DIE_AT
    assert "from memory" in again.stderr
    assert jobs.bitwise_equal(jobs.params(tmp_path / "b"), reference[mode])


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_node_lost_restores_from_disk(tmp_path, reference, crashed, mode):
    again, persisted = _crash_and_restart(tmp_path, crashed, mode, keep_memory=False, how="nowait")
    steps = jobs.restored(tmp_path / "b")
    assert steps == [persisted.newest_step] * 2
    assert "from disk" in again.stderr and "from memory" not in again.stderr
    assert jobs.bitwise_equal(jobs.params(tmp_path / "b"), reference[mode])


def test_one_rank_from_memory_the_other_from_disk(tmp_path, reference, crashed):
    """Two nodes in one: rank 1's node is lost (its store gone), rank 0's kept
    its memory; they agree on one step and each reads it from where it has it.
    (The same crash as test_process_crash_restores_from_memory[ddp].)"""
    node, persist, result = crashed("ddp", "wait", tmp_path)
    assert result.ok
    shutil.rmtree(store.rank_dir(node, 1))
    again = jobs.run(tmp_path / "b", "ddp", STEPS, node, persist)
    assert again.returncode == 0, again.stderr[-3000:]
    step = jobs.restored(tmp_path / "b")[0]
    assert jobs.restored(tmp_path / "b") == [step, step] and DIE_AT - 1 <= step <= DIE_AT
    assert f"rank 0: restored step {step} from memory" in again.stderr
    assert f"rank 1: restored step {step} from disk" in again.stderr
    assert jobs.bitwise_equal(jobs.params(tmp_path / "b"), reference["ddp"])


def test_ddp_restores_into_a_smaller_world(tmp_path, crashed):
    """A node left out (issue 19 item 4): a 2-rank DDP job dies after step 5
    and comes back with 1 rank. Its replica is sound in any data-parallel
    world: rank 0 restores it from memory, exactly the state at that step.
    (The same crash as test_process_crash_restores_from_memory[ddp]; the
    restart is given no persist directory, so only memory can serve it.)"""
    node, _, _ = crashed("ddp", "wait", tmp_path)
    slot = next(r for r in store.committed(store.rank_dir(node, 0)) if r.meta.step == DIE_AT)
    with store.reading(slot) as (data, _):
        saved = [t.clone() for e, t in zip(slot.meta.tensors, layout.views(data, slot.meta.tensors))
                 if e.path[0] == "model"]
    again = jobs.run(tmp_path / "b", "ddp", DIE_AT, node, None, world=1)   # restore, no step after it
    assert again.returncode == 0, again.stderr[-3000:]
    assert jobs.restored(tmp_path / "b", world=1) == [DIE_AT]
    assert (f"step {DIE_AT} was saved by a job of world size 2; restoring its replicated state into 1 rank(s)"
            in again.stderr and f"restored step {DIE_AT} from memory" in again.stderr), again.stderr[-3000:]
    assert jobs.bitwise_equal(jobs.params(tmp_path / "b", world=1), [saved])
