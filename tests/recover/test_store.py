"""The node's snapshot store: the commit rule (meta written last), a writer
killed mid-write, a corrupt slot, tmpfs full, the agent holding a slot."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from diag.recover import Checkpointer, api, store
from tests.recover import helpers
from tests.tmpfs import small_tmpfs
from tests.waiting import poll_until, wait_for


def _meta(step, nbytes=64, objects=b"x", checksum="0"):
    return api.SnapshotMeta(step=step, rank=0, world_size=1, checksum=checksum, data_bytes=nbytes,
                            objects_bytes=len(objects), tensors=(), names=("s",), replicated=False,
                            holder=True, created=time.time())


def test_commit_rule_and_double_buffer(tmp_path):
    w = store.SlotWriter(str(tmp_path), 0)
    rdir = store.rank_dir(str(tmp_path), 0)
    for step in (1, 2):
        slot, buf = w.begin(64)
        buf[:] = bytes([step]) * 64
        w.commit(_meta(step), b"x")
    assert [r.meta.step for r in store.committed(rdir)] == [2, 1]
    slot, buf = w.begin(64)                       # overwrites step 1's slot, never step 2's
    assert [r.meta.step for r in store.committed(rdir)] == [2]
    assert store.slot_dir(rdir, slot) != store.committed(rdir)[0].path
    w.abort()                                     # a writer that gave up leaves it invalid
    assert [r.meta.step for r in store.committed(rdir)] == [2]


def test_agent_holding_a_slot_makes_the_writer_skip_not_wait(tmp_path):
    ck = Checkpointer(str(tmp_path), None)
    state = {"w": torch.ones(1000)}
    ck.register(state=state)
    assert ck.save(1) and ck.wait(10)
    assert ck.save(2) and ck.wait(10)
    ref = store.committed(store.rank_dir(str(tmp_path), 0))[1]   # step 1: the slot step 3 wants
    with store.reading(ref):
        assert ck.save(3) and ck.wait(10)
    assert ck.stats["skipped_slot"] == 1 and ck.enabled
    assert [r.meta.step for r in store.committed(store.rank_dir(str(tmp_path), 0))] == [2, 1]


def _writer_busy(rdir: str) -> bool:
    for slot in range(api.SLOTS):
        name = os.path.join(store.slot_dir(rdir, slot), api.LOCK_FILE)
        if not os.path.exists(name):
            continue
        fd = os.open(name, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
    return False


def test_snapshot_killed_mid_write_is_never_restored(tmp_path):
    node = store.create_store_dir("t", 0, base=str(tmp_path))
    rdir = store.rank_dir(node, 0)
    proc = helpers.big(64, 0, node)
    try:
        wait_for(lambda: len(store.committed(rdir)) == 2, timeout=60, what="two committed snapshots")
        assert poll_until(lambda: _writer_busy(rdir), timeout=30, interval=0.0002)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    refs = store.committed(rdir)
    assert refs                                  # the slot being written has (almost always) no meta
    code, out, err = helpers.big_run(64, 1, node)
    assert code == 0, err
    assert out.splitlines()[0] == f"restored {refs[0].meta.step} ok"


_HALF = """
import sys, time
from diag.recover import store
w = store.SlotWriter(sys.argv[1], 0)
slot, buf = w.begin(1 << 20)
buf[: 1 << 19] = b"\\xff" * (1 << 19)
print(slot, flush=True)
time.sleep(60)
"""


def test_writer_killed_with_half_a_slot_leaves_the_previous_snapshot(tmp_path):
    code, out, err = helpers.big_run(1, 2, str(tmp_path))
    assert code == 0, err
    rdir = store.rank_dir(str(tmp_path), 0)
    before = store.committed(rdir)
    proc = subprocess.Popen([sys.executable, "-c", _HALF, str(tmp_path)], cwd=helpers.jobs.ROOT,
                            stdout=subprocess.PIPE, text=True)
    slot = int(proc.stdout.readline())
    proc.kill()
    proc.wait()
    assert store.slot_dir(rdir, slot) == before[1].path          # it took the older slot
    assert store.committed(rdir) == before[:1]                    # which is no longer a snapshot
    code, out, err = helpers.big_run(1, 1, str(tmp_path))
    assert out.splitlines()[0] == "restored 2 ok", err


def test_corrupt_slot_is_named_and_the_older_one_restored(tmp_path):
    code, out, err = helpers.big_run(1, 3, str(tmp_path))
    assert code == 0, err
    rdir = store.rank_dir(str(tmp_path), 0)
    newest, older = store.committed(rdir)
    assert (newest.meta.step, older.meta.step) == (3, 2)
    with open(os.path.join(newest.path, api.DATA_FILE), "r+b") as f:
        f.seek(100)
        f.write(b"\x7f")
    code, out, err = helpers.big_run(1, 0 + 1, str(tmp_path))
    assert code == 0, err
    assert out.splitlines()[0] == "restored 2 ok"
    assert f"{newest.path}: checksum" in err and "skipped" in err


@pytest.fixture
def tiny_tmpfs(tmp_path):
    with small_tmpfs(tmp_path / "shm", "1M") as mnt:
        yield str(mnt)


def test_store_full_switches_snapshots_off_with_one_line(tiny_tmpfs):
    code, out, err = helpers.big_run(4, 5, tiny_tmpfs)     # 4 MiB into a 1 MiB tmpfs
    assert code == 0, err                                   # the job ran to its end
    lines = [line for line in err.splitlines() if "xpu-diag recover" in line]
    assert len(lines) == 1 and "no room for 4 MiB" in lines[0] and "snapshots are off" in lines[0]
    assert "Traceback" not in err
    assert store.committed(store.rank_dir(tiny_tmpfs, 0)) == []
