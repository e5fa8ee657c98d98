"""The snapshot queue's ordering (snapshot.py): save() hands each snapshot to
the background thread without waiting; the thread issues copy N only after N-1
committed; the next optimizer step waits for copy N (on CPU, on the host).

A real slow path: a state of tens of MiB on CPU, whose copy and checksum take
longer than the step, so the background thread is always behind. Whatever the
lag, the newest committed slot is never overwritten before the next commit, a
half-written slot is never restored, and what is restored is the state at its
step. When the copy fits in a step, nothing is skipped or waited for."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import torch

from diag.recover import Checkpointer, store
from tests.recover import jobs
from tests.recover.test_store import _writer_busy
from tests.waiting import poll_until, wait_for

SLOW = str(Path(__file__).parent / "scripts" / "slowcopy.py")


def _param(mb: float):
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.zeros(int(mb * (1 << 18))))
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model.w.grad = torch.full_like(model.w, -1.0)     # each step raises w by 1: its value is the step
    return model, opt


def _look(rdir: str) -> list:
    """The committed slots, read until two reads agree: one read opens the two
    metas one after the other, and a commit plus the next begin() can fall
    between them (the reader then sees neither: a torn look, not a torn store)."""
    last = store.committed(rdir)
    while True:
        now = store.committed(rdir)
        if now == last:
            return now
        last = now


class _Watch(threading.Thread):
    """Lists the committed slots as fast as it can while the job runs:
    (newest step, every committed step) per look."""

    def __init__(self, rdir: str):
        super().__init__(daemon=True)
        self.rdir, self.looks, self.stop = rdir, [], threading.Event()

    def run(self):
        while True:
            stopping = self.stop.is_set()        # one more look after the job's last commit
            self.looks.append([r.meta.step for r in _look(self.rdir)])
            if stopping:
                return
            time.sleep(0.0005)


def _run(tmp_path, mb: float, steps: int, step_work=None):
    """Train ``steps`` steps with a snapshot each; returns (ck, model, watcher,
    lags, slots): lags[N] = (newest committed right after save(N), right after
    step N+1's optimizer pre-hook let it go); slots[N] = the slot directories
    step N was seen committed in."""
    model, opt = _param(mb)
    ck = Checkpointer(str(tmp_path), None)
    ck.register(model=model, optim=opt)
    rdir = store.rank_dir(str(tmp_path), 0)
    watch = _Watch(rdir)
    watch.start()

    slots: dict[int, set] = {}

    def newest():
        refs = _look(rdir)
        for ref in refs:
            slots.setdefault(ref.meta.step, set()).add(ref.path)
        return refs[0].meta.step if refs else 0
    lags, after_save = {}, None
    for step in range(1, steps + 1):
        if step_work:
            step_work()
        opt.step()
        if step > 1:
            lags[step - 1] = (after_save, newest())
        ck.save(step)
        after_save = newest()
    assert ck.wait(60)
    watch.stop.set()
    watch.join()
    newest()
    return ck, model, watch, lags, slots


def _alternate(slots: dict[int, set], steps: int) -> None:
    """Every step was seen committed (after step N+1's pre-hook, N-1 is), in
    one slot, never the one of the step before."""
    assert sorted(slots) == list(range(1, steps + 1)), sorted(slots)
    assert all(len(paths) == 1 for paths in slots.values()), slots
    assert all(slots[n] != slots[n - 1] for n in range(2, steps + 1)), slots


def _never_went_back(looks: list[list[int]]) -> None:
    """Once something committed: always something, and the newest never older."""
    best = 0
    for steps in looks:
        if best:
            assert steps, "no committed slot at all: the newest was overwritten"
        if steps:
            assert steps[0] >= best, f"newest committed went from {best} back to {steps[0]}"
            assert len(set(steps)) == len(steps), steps
            best = steps[0]


def test_a_copy_slower_than_the_step_keeps_every_snapshot_and_never_the_newest_slot(tmp_path):
    ck, model, watch, lags, slots = _run(tmp_path, mb=24, steps=25)
    # The premise: the copy was slower than the step (the pre-hook had to wait for it).
    assert ck.stats["prehook_waits"] > 0, ck.stats
    # save() never waited; nothing was skipped; every snapshot committed in order.
    assert ck.stats["busy_waits"] == 0 and ck.stats["busy_wait_s"] == 0.0, ck.stats
    assert ck.stats["saved"] == ck.stats["committed"] == 25, ck.stats
    assert ck.stats["skipped_busy"] == ck.stats["skipped_slot"] == 0 and ck.stats["last_step"] == 25
    _never_went_back(watch.looks)
    _alternate(slots, 25)
    for step, (after_save, after_prehook) in lags.items():
        assert after_save >= step - 2, (step, lags)           # one being copied, one queued at most
        assert after_prehook >= step - 1, (step, lags)        # the next step waited for copy N, so N-1 is in
    refs = store.committed(store.rank_dir(str(tmp_path), 0))
    assert [r.meta.step for r in refs] == [25, 24]
    for ref in refs:
        with store.reading(ref, verify=True) as (data, _):
            assert bool((torch.frombuffer(data, dtype=torch.float32) == ref.meta.step).all()), ref.meta.step


def test_a_copy_that_fits_in_the_step_is_never_waited_for_nor_skipped(tmp_path):
    ck, model, watch, lags, slots = _run(tmp_path, mb=0.0625, steps=20, step_work=lambda: time.sleep(0.02))
    assert ck.stats["busy_waits"] == 0, ck.stats
    assert ck.stats["saved"] == ck.stats["committed"] == 20 and ck.stats["last_step"] == 20, ck.stats
    assert ck.stats["skipped_busy"] == ck.stats["skipped_slot"] == 0, ck.stats
    _never_went_back(watch.looks)
    # Steps alternate between the slots; each look shows consecutive steps.
    _alternate(slots, 20)
    assert all(len(s) < 2 or s[0] == s[1] + 1 for s in watch.looks), watch.looks
    for step, (_, after_prehook) in lags.items():
        assert after_prehook >= step - 1, (step, lags)


def _slow(store_dir: str, steps: int, mb: int = 24):
    """scripts/slowcopy.py in a process of its own, forked with torch imported (tests/preloaded.py)."""
    return jobs.forked([SLOW, str(mb), str(steps)], store_dir)


def _kill_mid_write(proc, rdir: str) -> tuple[int, int]:
    """SIGKILL while the background thread has a slot open; returns (the
    last step save() was called for, the newest committed step left)."""
    wait_for(lambda: len(store.committed(rdir)) == 2, timeout=60, what="two committed snapshots")
    busy = poll_until(lambda: _writer_busy(rdir), timeout=30, interval=0.0002)
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert busy, err
    saved = [int(line.split()[1]) for line in out.splitlines() if line.startswith("saved ")]
    refs = store.committed(rdir)
    assert refs and saved, (out, err)
    return saved[-1], refs[0].meta.step


def test_killed_mid_copy_with_the_thread_behind_restores_the_newest_committed_step(tmp_path):
    node = store.create_store_dir("order", 0, base=str(tmp_path))
    rdir = store.rank_dir(node, 0)
    proc = _slow(node, 0)
    try:
        saved, newest = _kill_mid_write(proc, rdir)
    finally:
        proc.kill()
    assert saved - 2 <= newest <= saved + 1, (saved, newest)     # "saved N" is printed after save(N)
    proc = _slow(node, newest + 3)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines()[0] == f"restored {newest} ok" and out.splitlines()[-1] == f"saved {newest + 3}"
    assert [r.meta.step for r in store.committed(rdir)] == [newest + 3, newest + 2]
