"""Persisted copies: stock DCP, idempotent, pruned; a persist killed mid-write
or out of disk is never restored (the previous copy is); bad input is one line."""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import signal
import threading
import time

import pytest
import torch
import torch.distributed.checkpoint as dcp

from diag.recover import api, persist, store
from diag.recover.persist import persist_newest
from tests.recover import helpers, jobs
from tests.tmpfs import small_tmpfs
from tests.waiting import poll_until


def _job(tmp_path, mb, steps, node=None, **env):
    node = node or str(tmp_path / "node")
    os.makedirs(node, exist_ok=True)
    code, out, err = helpers.big_run(mb, steps, node)
    assert code == 0, err
    return node, out


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_persist_writes_stock_dcp_once_and_keeps_two(tmp_path):
    node, _ = _job(tmp_path, 1, 3)
    disk = str(tmp_path / "disk")
    first = persist_newest(node, disk)
    assert [(r.outcome, r.step, r.steps) for r in first.ranks] == [("written", 3, (3, 2))]
    assert first.newest_step == 3
    again = persist_newest(node, disk)
    assert [(r.outcome, r.step) for r in again.ranks] == [("present", 3)]
    state = {"state": {"w": torch.empty(1 << 18), "step": 0}}
    dcp.load(state, checkpoint_id=persist.copy_dir(disk, 3, 0), no_dist=True)   # the user's way
    assert state["state"]["step"] == 3 and bool((state["state"]["w"] == 3).all())
    _job(tmp_path, 1, 5, node)
    persist_newest(node, disk)
    assert [s for s, _ in persist.copies(disk, 0)] == [5, 4]
    assert sorted(os.listdir(disk)) == ["step-00000004", "step-00000005"]


def test_a_node_that_lags_then_dies_leaves_a_step_every_rank_has(tmp_path, monkeypatch):
    """Nodes persist on their own ticks into the --ckpt-dir they share, and a
    loaded node lags. Node A (rank 0) and node B (rank 1) both persisted
    steps 1 and 2. B then starts on 3 and 4 and is held at its copy (its temp
    directories made) while A persists 3 to 8, keeping 3 copies. A keeps 2,
    the newest step both have, and 3 and 4, which B is writing. B finishes and
    dies: a new job restores step 4 from disk on both ranks and ends bitwise
    where the undisturbed one did. Before, A pruned down to 8, 7, 6 and the
    new job started afresh."""
    node, node_b, disk = tmp_path / "node", tmp_path / "node-b", str(tmp_path / "disk")

    def run_to(steps, store=node, persist=None, out=None):
        done = jobs.run(out or tmp_path / f"to{steps}", "ddp", steps, str(store), persist)
        assert done.returncode == 0, done.stderr
        return out or tmp_path / f"to{steps}"

    node.mkdir(mode=0o700)
    run_to(2)
    assert persist_newest(str(node), disk, keep=3).newest_step == 2
    run_to(4)
    persist_newest(str(node), disk, keep=3, ranks=[0])
    node_b.mkdir(mode=0o700)          # B's own store: its worker's slots stay at 3 and 4
    shutil.copytree(node / "rank-00001", node_b / "rank-00001")
    held, go = threading.Event(), threading.Event()
    real_copy_out = store.copy_out

    def loaded_node(ref):
        if threading.current_thread().name == "node-b":
            held.set()
            assert go.wait(120)
        return real_copy_out(ref)

    monkeypatch.setattr(store, "copy_out", loaded_node)
    b_result = []
    b = threading.Thread(target=lambda: b_result.append(persist_newest(str(node_b), disk, keep=3)),
                         name="node-b", daemon=True)
    b.start()
    try:
        assert held.wait(60)
        for step in (3, 4):    # both copies are started before either is read
            inside = os.listdir(persist.step_dir(disk, step))
            assert any(name.startswith(".tmp-rank-00001-") for name in inside), (step, inside)
        for steps in (6, 8):
            run_to(steps)
            persist_newest(str(node), disk, keep=3, ranks=[0])
        assert [s for s, _ in persist.copies(disk, 0)] == [8, 7, 6, 4, 3, 2]
    finally:
        go.set()
        b.join(120)
    assert [(r.outcome, r.step, r.steps) for r in b_result[0].ranks] == [("written", 4, (4, 3, 2))]
    persist.prune(disk, [0], keep=3, held=persist.wanted_by_the_job(disk, 2))   # A's next: 4 is the step both have
    assert [s for s, _ in persist.copies(disk, 0)] == [8, 7, 6, 4]
    fresh = tmp_path / "new-node"
    fresh.mkdir(mode=0o700)
    again = run_to(8, fresh, disk, tmp_path / "again")
    assert jobs.restored(again) == [4, 4]
    assert jobs.bitwise_equal(jobs.params(again), jobs.params(tmp_path / "to8"))


def test_copies_waiting_their_turn_stay_fresh_to_the_other_nodes(tmp_path, monkeypatch):
    """A node's copies are started together and written one by one. One that
    waits its turn longer than 10 minutes (a large model) must not look like a
    killed persist's, stale, to the other nodes' prune. The wait is aged by
    hand: at the first copy's read every temp directory is set 601 s back;
    each later read finds every temp directory left fresh again."""
    node, disk = tmp_path / "node", str(tmp_path / "disk")
    node.mkdir(mode=0o700)
    done = jobs.run(tmp_path / "out", "ddp", 2, str(node), None)
    assert done.returncode == 0, done.stderr
    real_copy_out, ages = store.copy_out, []

    def aged(ref):
        temps = glob.glob(os.path.join(disk, "step-*", ".tmp-rank-*"))
        if ages or not temps:
            ages.append(max(time.time() - os.stat(t).st_mtime for t in temps))
        else:
            for path in temps:
                os.utime(path, (time.time() - 601,) * 2)
            ages.append(None)
        return real_copy_out(ref)

    monkeypatch.setattr(store, "copy_out", aged)
    result = persist_newest(str(node), disk)
    assert [(r.rank, r.outcome, r.steps) for r in result.ranks] == [(0, "written", (2, 1)), (1, "written", (2, 1))]
    assert ages[0] is None and len(ages) == 4 and max(ages[1:]) < 60, ages


def test_ranks_with_no_step_in_common_start_afresh_saying_so_once(tmp_path):
    """Rank 0's copies are of steps 1 and 2, rank 1's of 3 and 4. A new job
    starts afresh and says why in one line for the job (not one a rank, which
    would be thousands), naming what each rank has."""
    node, disk, fresh = tmp_path / "node", str(tmp_path / "disk"), tmp_path / "new-node"
    for d in (node, fresh):
        d.mkdir(mode=0o700)
    for steps, rank in ((2, 0), (4, 1)):
        done = jobs.run(tmp_path / f"to{steps}", "ddp", steps, str(node), None)
        assert done.returncode == 0, done.stderr
        persist_newest(str(node), disk, ranks=[rank])
    again = jobs.run(tmp_path / "again", "ddp", 4, str(fresh), disk)
    assert again.returncode == 0, again.stderr
    said = [line for line in again.stderr.splitlines() if "no step that every rank has" in line]
    assert said == ["xpu-diag recover: rank 0: no step that every rank has (rank 0 has [1, 2]; "
                    "rank 1 has [3, 4]); starting afresh"], again.stderr
    assert jobs.restored(tmp_path / "again") == [0, 0]


_PERSIST = "import sys; from diag.recover.persist import persist_newest as p; print(p(*sys.argv[1:]).summary())"


def _persist_proc(node, disk, limit=None):
    """The agent's persist in a process of its own (to kill it, or cap its file size)."""
    return jobs.forked(["-c", _PERSIST, node, disk], fsize=limit)


def _restore_from_disk(tmp_path, disk, mb):
    empty = tmp_path / "new-node"
    empty.mkdir(exist_ok=True)
    code, out, err = helpers.big_run(mb, 1, str(empty), disk)
    return code, out, err


def test_persist_killed_mid_write_leaves_the_previous_copy(tmp_path):
    node, _ = _job(tmp_path, 256, 2)
    disk = str(tmp_path / "disk")
    assert persist_newest(node, disk).newest_step == 2
    _job(tmp_path, 256, 4, node)                 # the store now holds 4 and 3
    proc = _persist_proc(node, disk)
    step4 = os.path.join(disk, api.STEP_DIR.format(step=4))
    try:
        assert poll_until(lambda: os.path.isdir(step4) and any(n.startswith(".tmp-") for n in os.listdir(step4)),
                          timeout=60, interval=0.0005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert not os.path.exists(persist.copy_dir(disk, 4, 0))
    code, out, err = _restore_from_disk(tmp_path, disk, 256)
    assert code == 0, err
    step = int(out.split()[1])
    assert out.splitlines()[0] == f"restored {step} ok" and step in (2, 3)
    # The killed persist's temp directories are swept once stale (10 min);
    # another rank's, being written, are not this node's to remove.
    left = [os.path.join(step4, n) for n in os.listdir(step4) if n.startswith(".tmp-")]
    assert left
    for path in left:
        os.utime(path, (time.time() - 601,) * 2)
    os.mkdir(os.path.join(step4, ".tmp-rank-00007-being-written"))
    assert persist_newest(node, disk).newest_step == 4
    assert sorted(os.listdir(step4)) == [".tmp-rank-00007-being-written", "rank-00000"]


@pytest.fixture
def tiny_tmpfs(tmp_path):
    with small_tmpfs(tmp_path / "disk", "6M") as mnt:
        yield str(mnt)


@pytest.mark.parametrize("full", ["ulimit", "tmpfs"])
def test_disk_full_fails_the_persist_and_the_previous_copy_is_restored(tmp_path, request, full):
    node, _ = _job(tmp_path, 4, 1)
    disk = request.getfixturevalue("tiny_tmpfs") if full == "tmpfs" else str(tmp_path / "disk")
    assert persist_newest(node, disk).newest_step == 1     # 4 MiB of the 6
    _job(tmp_path, 4, 2, node)
    # files over 1 MiB: EFBIG; or the 6 MiB filesystem full
    proc = _persist_proc(node, disk, limit=1 << 20 if full == "ulimit" else None)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    why = "the file size limit (ulimit -f) is 1048576 bytes" if full == "ulimit" else "no room ("
    assert out.startswith("rank 0: failed step 2 (") and why in out, out
    assert [s for s, _ in persist.copies(disk, 0)] == [1]
    assert not any(n.startswith(".tmp-") for n in os.listdir(os.path.join(disk, "step-00000002")))
    code, out, err = _restore_from_disk(tmp_path, disk, 4)
    assert out.splitlines()[0] == "restored 1 ok", err


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_restore_into_a_larger_world_is_one_line(tmp_path):
    """A smaller world restores a replicated state (test_dist.py); a larger
    one has ranks with no state of their own: refused, naming the copy."""
    node = str(tmp_path / "node")
    os.makedirs(node)
    code, out, err = helpers.big_run(1, 2, node)
    assert code == 0, err
    disk = str(tmp_path / "disk")
    persist_newest(node, disk)
    done = helpers.big(1, 1, str(tmp_path / "empty"), disk, WORLD_SIZE="2", RANK="0")
    _, err = done.communicate(60)
    line = _one_line(err)
    manifest = os.path.join(persist.copy_dir(disk, 2, 0), api.MANIFEST_FILE)
    assert done.returncode == 2 and line.startswith(
        f"xpu-diag recover: rank 0: {manifest}: written by a job of world size 1, this one has 2"), line
    assert "restart with 1 ranks" in line


def test_sharded_state_into_another_world_size_names_the_reshard(tmp_path):
    from diag.recover import restore
    meta = api.SnapshotMeta(step=3, rank=0, world_size=2, checksum="0", data_bytes=0, objects_bytes=0,
                            tensors=(), names=("model",), replicated=False, holder=True, created=0.0)
    with pytest.raises(api.RestoreMismatch, match=r"sharded state .* world size 2, this one has 1; restart "
                                                  r"with 2 ranks, or reshard it: dcp.load"):
        restore.check_fits("m.json", meta, 0, 1, ("model",), "/root")
    replica = dataclasses.replace(meta, replicated=True)
    restore.check_fits("m.json", replica, 0, 1, ("model",), "/root")          # a replica: fits a smaller world
    with pytest.raises(api.RestoreMismatch, match="world size 2, this one has 4"):
        restore.check_fits("m.json", replica, 0, 4, ("model",), "/root")


def test_corrupt_manifest_is_one_line_naming_it(tmp_path):
    node, _ = _job(tmp_path, 1, 2)
    disk = str(tmp_path / "disk")
    persist_newest(node, disk)
    manifest = os.path.join(persist.copy_dir(disk, 2, 0), api.MANIFEST_FILE)
    with open(manifest, "w") as f:
        f.write('{"step": 2, "rank"')
    code, out, err = helpers.big_run(1, 1, str(tmp_path / "empty"), disk)
    line = _one_line(err)
    assert code == 2 and f"{manifest}: not a manifest; remove {os.path.dirname(manifest)}" in line


def test_persisting_while_the_worker_snapshots_every_step(tmp_path):
    """The agent's periodic persist against a live writer: the flock keeps
    them apart, every persist succeeds, and every copy it wrote restores."""
    node = str(tmp_path / "node")
    os.makedirs(node)
    disk = str(tmp_path / "disk")
    proc = helpers.big(16, 0, node)
    try:
        assert poll_until(lambda: len(store.committed(store.rank_dir(node, 0))) == 2, timeout=60)
        results = [persist_newest(node, disk) for _ in range(15)]
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert all(r.ok for r in results), [r.summary() for r in results if not r.ok]
    assert len({r.ranks[0].step for r in results}) > 1, "the worker moved on while we persisted"
    assert "Traceback" not in err
    code, out, err = _restore_from_disk(tmp_path, disk, 16)
    newest = persist.copies(disk, 0)[0][0]
    assert code == 0 and out.splitlines()[0] == f"restored {newest} ok", err
