"""The worker's side: :class:`Checkpointer` (register, save, restore).

``save(step)`` costs the training thread the ``state_dict()`` calls, a clone
of the few tensors the optimizer does not own (buffers, RNG state) and one
CUDA event, then hands the job to a background thread and returns: it never
waits for an earlier snapshot (while the optimizer pre-hook runs, below, at
most one is queued behind the one being copied). The background thread takes
the jobs in order and issues the copy of step N only after step N-1 has
committed, so the slot it overwrites never holds the newest committed
snapshot; it copies the tensors device-to-host straight into the slot's tmpfs
pages (pinned with cudaHostRegister, so the copy is asynchronous DMA on its
own stream), checksums them and commits the slot. The next
``optimizer.step()`` must not change a tensor while it is being copied: a
step pre-hook on each registered optimizer waits on the host only until that
copy is *issued* (its CUDA event recorded: waiting on an unrecorded event is
a no-op), then makes the compute stream wait for it on the device; on CPU the
host waits for the copy itself.

Never hurts training: any failure says one line and switches snapshots off;
``save`` never raises and never waits for I/O.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import json
import os
import sys
import threading
import time

import torch

from diag.recover import api, checksum, layout, store
from diag.recover.devcopy import HOST_REGISTER_PORTABLE, clear_cuda_error, copy_all, cuda_error_name
from diag.recover.restore import restore as _restore
from diag.recover.dsengine import Unsupported
from diag.recover.state import Adapter, dist_info, has_dtensor, partial_state

_PREHOOK_TIMEOUT_S = 120.0
_BUSY_TIMEOUT_S = 60.0
_QUEUE = 2     # jobs not finished: the one being copied and one waiting (see _save)
# Word sums (checksum.py) of the smallest tensors, up to this many bytes in
# all, are taken on the host from the slot after the copy; the rest on the
# device. Each device sum is a kernel on the side stream interleaved with the
# training step's kernels: GPT-2 small has ~450 tensors with AdamW, ~320 of
# them in its smallest 64 MiB (biases, LayerNorms). The bench sets it
# (--host-sum-mib; a large value: no sum kernels at all).
HOST_SUM_BYTES = 64 << 20
_SUM_THREADS = min(8, (os.cpu_count() or 1) // 4)   # host sums of 64 MiB or more: on these threads


class _Job:
    """One snapshot on its way from save() to a committed slot."""

    def __init__(self, step, pairs, entries, nbytes, objects, ready_event):
        self.step, self.pairs, self.entries, self.nbytes = step, pairs, entries, nbytes
        self.objects, self.ready_event = objects, ready_event
        self.issued = threading.Event()      # copies issued (CUDA) or done (CPU)
        self.done_event = None               # CUDA event after the last copy
        self.copied = threading.Event()      # host: every byte is in the slot (or given up)
        self.abandoned = False               # the pre-hook gave up waiting: never commit
        self.taken = False                   # the background thread began it (under _cond)
        self.cancelled = False               # on_busy="skip": dropped before it was taken
        self.saved_at = time.perf_counter()
        self.names: tuple[str, ...] = ()     # the registered names this snapshot holds
        self.aliases: tuple[int, ...] = tuple(range(len(entries)))   # tied tensors (layout.place)


class Checkpointer:
    """Opt-in snapshots of a training job's state, kept by the node agent.

    Args:
        store_dir: the node's store; default ``$XPU_TIMER_CKPT_DIR`` (set by
            xpu_timer_launch). Without one, nothing is kept (one line says so).
        persist_dir: the persisted copies restore falls back to; default
            ``$XPU_TIMER_CKPT_PERSIST_DIR``.
        replicated: True for DDP (one replica is kept, by ``holder``, and
            broadcast on restore), False when each rank owns a shard (FSDP2,
            tensor parallel, a DeepSpeed engine, Megatron's distributed
            optimizer). None: False if any registered state holds a DTensor
            or is such a framework's partition, else True.
        holder: the global rank that keeps the replicated state (DP rank 0).
        every: save(step) acts when ``step % every == 0``.
        on_busy: what happens to a snapshot that cannot be copied before the
            next optimizer step (the previous one is still being copied, a
            copy slower than ``every`` steps): "wait" (default) keeps every
            snapshot, the next step's pre-hook waits for it on the host (the
            only case where the training thread waits; the bench shows when);
            "skip" drops it (never waits; ranks may then keep different steps
            and restore an older common one).
        group: the process group restore agrees over (default: the world).
    """

    def __init__(self, store_dir: str | None = None, persist_dir: str | None = None, *,
                 replicated: bool | None = None, holder: int = 0, every: int = 1,
                 on_busy: str = "wait", group=None, log=None):
        if on_busy not in ("wait", "skip"):
            raise ValueError(f"Checkpointer: on_busy={on_busy!r}; use \"wait\" or \"skip\"")
        self.store_dir = store_dir if store_dir is not None else os.environ.get(api.ENV_STORE_DIR) or None
        self.persist_dir = (persist_dir if persist_dir is not None
                            else os.environ.get(api.ENV_PERSIST_DIR) or None)
        self.replicated, self.holder, self.every, self.group = replicated, holder, max(1, int(every)), group
        self.on_busy = on_busy
        self._said_busy = False
        self._log = log or sys.stderr
        self.shared: dict[str, Adapter] = {}
        self.local: dict[str, Adapter] = {}
        self.stats = {"saved": 0, "committed": 0, "skipped_busy": 0, "skipped_slot": 0,
                      "last_step": None, "copy_s": 0.0, "commit_s": 0.0, "busy_wait_s": 0.0,
                      "busy_waits": 0, "prehook_wait_s": 0.0, "prehook_waits": 0, "queued_s": 0.0,
                      "save_call_s": 0.0,
                      "d2h_s": 0.0, "d2h_bytes": 0, "d2h_timed": 0, "device_sum_s": 0.0,
                      "device_sums": 0}
        self.enabled = os.environ.get(api.ENV_DISABLE, "") in ("", "0")
        self._writer: store.SlotWriter | None = None
        self._pending: _Job | None = None          # the job the next optimizer step must wait for
        self._jobs: collections.deque[_Job] = collections.deque()   # saved, not finished; [0] the thread's
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stream = None
        self._pinned: dict[int, tuple[int, int]] = {}  # slot -> (ptr, size) registered
        self._views: dict[int, tuple[tuple, list]] = {}
        self._said_off = False
        self._refused = False       # a registration was refused (state.partial_state)
        self._said_pin = False
        self._hooked: set[int] = set()
        self._rank, self._world = None, None
        self._plan = None     # (key, entries, nbytes) of the last layout
        self._device = 0      # the CUDA device of the training thread's stream
        self._rendered = None  # (entries, their JSON)
        self._guard = None    # (key, guarded data_ptrs)
        self._sum_plan = None  # (entries, the entry indices summed on the device)
        self._pool = None      # threads for large host sums (_host_sums)
        if self.enabled and self.store_dir is None:
            self._off(f"no snapshot store ({api.ENV_STORE_DIR} unset: run under xpu_timer_launch "
                      f"or pass store_dir); save() keeps nothing")

    # -- registration -------------------------------------------------------

    def register(self, **objects) -> None:
        """The state one replica (DDP) or each rank's shard (FSDP2) holds:
        modules, optimizers, schedulers, Stateful objects, plain dicts."""
        for name, obj in objects.items():
            self._add(self.shared, name, obj)

    def register_local(self, **objects) -> None:
        """State every rank keeps for itself (RNG, data-loader position, step)."""
        for name, obj in objects.items():
            self._add(self.local, name, obj)

    def _add(self, where: dict, name: str, obj) -> None:
        if name in self.shared or name in self.local:
            raise ValueError(f"Checkpointer: {name!r} is registered twice; give each object its own name")
        why = partial_state(obj)
        try:
            adapter = None if why else Adapter(obj)
        except Unsupported as exc:
            why = str(exc)
        if why:   # a partial snapshot restored would resume another job: none at all, said once
            self._refused = True
            self._off(f"Checkpointer: {name!r} is {why} (docs/recovery.md, Limits); snapshots are off")
            return
        if adapter.sharded and where is self.shared and self.replicated:
            raise ValueError(f"Checkpointer: {name!r} is a {type(obj).__name__}, which holds this rank's "
                             f"partition; leave replicated unset (or False)")
        where[name] = adapter
        for line in (adapter.view.notes() if adapter.view is not None else ()):
            self._say(f"{name!r}: {line}")
        for opt in adapter.optimizers():
            if id(opt) not in self._hooked:
                opt.register_step_pre_hook(lambda *_: self._before_optimizer_step())
                self._hooked.add(id(opt))

    # -- save ---------------------------------------------------------------

    def save(self, step: int) -> bool:
        """Snapshot the registered state as of ``step`` completed optimizer
        steps. Returns True if a snapshot was started. Never raises."""
        if not self.enabled or step % self.every:
            return False
        t0 = time.perf_counter()
        try:
            return self._save(int(step))
        except Exception as exc:
            self._off(f"snapshot of step {step} failed ({type(exc).__name__}: {exc}); snapshots are off")
            return False
        finally:
            self.stats["save_call_s"] += time.perf_counter() - t0

    def _save(self, step: int) -> bool:
        rank, _ = self._dist()
        if self.on_busy == "skip" and len(self._jobs) >= _QUEUE:
            self.stats["skipped_busy"] += 1
            return False
        names = self._names_kept(rank)
        guarded = self._guarded_ptrs()
        tensors, objects = [], []
        for name in names:
            adapter = self.shared.get(name) or self.local[name]
            t, o = layout.split({name: adapter.state_dict()})
            tensors += t
            objects += o
        pairs, aliases, first, any_cuda = [], [], {}, False
        for i, (path, t, is_d) in enumerate(tensors):
            if t.is_cuda:
                any_cuda = True
            # tied weights (GPT-2's lm_head is its wte): stored and copied once
            same = (t.device, t.data_ptr(), t.dtype, t.shape, t.stride()) if t.numel() else i
            aliases.append(first.setdefault(same, i))
            if aliases[-1] == i and (t.data_ptr() not in guarded or not t.is_contiguous()):
                t = t.detach().clone(memory_format=torch.contiguous_format)   # not ours to wait for
            pairs.append((path, t, is_d))
        aliases = tuple(aliases)
        entries, nbytes = self._place(pairs, aliases)
        ready = None
        if any_cuda:
            ready = torch.cuda.Event()
            ready.record()
            self._device = torch.cuda.current_device()   # the copy thread's must be the same
        job = _Job(step, [t for _, t, _ in pairs], entries, nbytes, layout.dump_objects(objects), ready)
        job.names, job.aliases = tuple(sorted(names)), aliases
        self._start_thread()
        with self._cond:
            # Queued, not waited for: the copy of the previous step (its GPU
            # work still queued behind this step's, since the CPU runs ahead)
            # commits in the background while this thread goes on launching.
            # A full queue happens only without a registered optimizer (no
            # pre-hook holds the training thread back to one copy in flight).
            if len(self._jobs) >= _QUEUE and not self._wait_room():
                self.stats["skipped_busy"] += 1
                return False
            if not self.enabled:     # the thread has stopped (and drained, under this lock): none would issue it
                return False
            self._jobs.append(job)
            self._pending = job
            self._cond.notify_all()
        self.stats["saved"] += 1
        return True

    def _wait_room(self) -> bool:
        """With on_busy="wait" (held: self._cond), wait until the job being
        copied is done, so at most one waits behind it."""
        if self.on_busy != "wait":
            return False
        t0 = time.perf_counter()
        self.stats["busy_waits"] += 1
        idle = self._cond.wait_for(lambda: len(self._jobs) < _QUEUE, _BUSY_TIMEOUT_S)
        self.stats["busy_wait_s"] += time.perf_counter() - t0
        if not idle and not self._said_busy:
            self._said_busy = True
            self._say(f"the previous snapshot is still being written after {_BUSY_TIMEOUT_S:.0f} s; "
                      f"this one is skipped (use every= to snapshot less often)")
        return idle

    def _names_kept(self, rank: int) -> list[str]:
        if self.replicated is None:
            self.replicated = not any(a.sharded or has_dtensor(a.state_dict()) for a in self.shared.values())
        keep_shared = not self.replicated or rank == self.holder
        return (sorted(self.shared) if keep_shared else []) + sorted(self.local)

    def _place(self, pairs, aliases) -> tuple[tuple, int]:
        """layout.place, remembered: the layout of a training job's state is
        the same step after step, and building ~600 entries costs ~1 ms."""
        key = (tuple((path, t.dtype, t.shape, is_d) for path, t, is_d in pairs), aliases)
        if self._plan is None or self._plan[0] != key:
            self._plan = (key, *layout.place(pairs, aliases))
        return self._plan[1], self._plan[2]

    def _guarded_ptrs(self) -> set[int]:
        """Storage of tensors only the optimizer changes: the pre-hook guards
        them. Recomputed when the optimizers' state grows (Adam's first step)
        and every 100 saves (a parameter's storage swapped by hand)."""
        opts = [o for a in self.shared.values() for o in a.optimizers() if id(o) in self._hooked]
        key = tuple((len(o.param_groups), sum(len(g["params"]) for g in o.param_groups), len(o.state))
                    for o in opts)
        if self._guard is not None and self._guard[0] == key and self.stats["saved"] % 100:
            return self._guard[1]
        ptrs = self._compute_guarded(opts)
        ptrs.update(layout.local(t)[0].data_ptr() for a in self.shared.values() for t in a.guarded())
        self._guard = (key, ptrs)
        return ptrs

    def _compute_guarded(self, opts) -> set[int]:
        ptrs = set()
        for opt in opts:
            for group in opt.param_groups:
                for p in group["params"]:
                    ptrs.add(layout.local(p)[0].data_ptr())
            for state in opt.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor):
                        ptrs.add(layout.local(v)[0].data_ptr())
        return ptrs

    def _before_optimizer_step(self) -> None:
        job = self._pending
        if job is None:
            return
        self._pending = None
        if self.on_busy == "skip":
            with self._cond:
                if not job.taken:        # its copy would have to wait for the previous one: dropped
                    job.cancelled = True
                    self.stats["skipped_busy"] += 1
                    return
        t0 = time.perf_counter()
        try:
            self._wait_copy(job)
        finally:
            took = time.perf_counter() - t0
            self.stats["prehook_wait_s"] += took
            self.stats["prehook_waits"] += took > 1e-3

    def _wait_copy(self, job: _Job) -> None:
        # The host waits only for the copy to be issued (normally it was, long
        # ago: the background thread issues it once the previous snapshot
        # commits, about one copy time after the GPU finished that step).
        if not job.issued.wait(_PREHOOK_TIMEOUT_S):
            job.abandoned = True
            self._off(f"the copy of step {job.step} did not start in {_PREHOOK_TIMEOUT_S:.0f} s; "
                      f"snapshots are off (training goes on)")
            return
        if job.done_event is not None:
            torch.cuda.current_stream().wait_event(job.done_event)
        elif not job.copied.wait(_PREHOOK_TIMEOUT_S):
            job.abandoned = True
            self._off(f"the copy of step {job.step} took over {_PREHOOK_TIMEOUT_S:.0f} s; snapshots are off")

    # -- the background thread ----------------------------------------------

    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="xpu-diag-snapshot", daemon=True)
            self._thread.start()
            atexit.register(self.close)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs:
                    self._cond.wait()
                job = self._jobs[0]
                if job.cancelled:
                    self._finish(job)
                    continue
                job.taken = True
            try:
                self._write(job)
            except api.StoreUnavailable as exc:
                self._off(str(exc))
            except Exception as exc:   # the loop never dies; a failed write leaves the slot invalid
                self._off(f"writing the snapshot of step {job.step} failed ({type(exc).__name__}: {exc}); "
                          f"snapshots are off")
            finally:
                with self._cond:
                    self._finish(job)
            if not self.enabled:
                with self._cond:         # nothing queued may keep a pre-hook waiting
                    while self._jobs:
                        self._jobs[0].abandoned = True
                        self._finish(self._jobs[0])
                return

    def _finish(self, job: _Job) -> None:
        """Held: self._cond. ``job`` (the queue's head) is done with."""
        job.issued.set()
        job.copied.set()
        job.pairs = None
        self._jobs.popleft()
        self._cond.notify_all()

    def _write(self, job: _Job) -> None:
        rank, world = self._dist()
        if self._writer is None:
            self._writer = store.SlotWriter(self.store_dir, rank)
        t0 = time.perf_counter()
        self.stats["queued_s"] += t0 - job.saved_at
        try:
            slot, buf = self._begin(job.nbytes)
        except store.SlotBusy:
            self.stats["skipped_slot"] += 1     # the agent is persisting it: next time
            return
        try:
            dsts = self._slot_views(slot, buf, job.entries)
            sums = self._copy(job, slot, dsts, buf)
            del dsts
            t1 = time.perf_counter()
            if job.abandoned or not self.enabled:
                return
            meta = api.SnapshotMeta(
                step=job.step, rank=rank, world_size=world,
                checksum=checksum.combine(sums + [checksum.word_sum(job.objects)]),
                data_bytes=job.nbytes, objects_bytes=len(job.objects), tensors=job.entries,
                names=job.names,
                replicated=bool(self.replicated), holder=rank == self.holder or not self.replicated,
                created=time.time())
            self._writer.commit(meta, job.objects, store.render(meta, self._tensors_json(job.entries)))
        finally:
            self._writer.abort()
        self.stats["committed"] += 1
        self.stats["last_step"] = job.step
        self.stats["copy_s"] += t1 - t0
        self.stats["commit_s"] += time.perf_counter() - t1

    def _tensors_json(self, entries) -> str:
        if self._rendered is None or self._rendered[0] is not entries:
            self._rendered = (entries, json.dumps([e.to_json() for e in entries]))
        return self._rendered[1]

    def _begin(self, nbytes: int):
        slot = self._writer.pick()
        have = self._writer.mapping(slot)
        if have is not None and len(have) != nbytes:
            self._unpin(slot)
            self._views.pop(slot, None)
        return self._writer.begin(nbytes)

    def _slot_views(self, slot: int, buf, entries) -> list:
        cached = self._views.get(slot)
        if cached is not None and cached[0] == entries:
            return cached[1]
        views = layout.views(buf, entries) if buf is not None else []
        self._views[slot] = (entries, views)
        return views

    def _copy(self, job: _Job, slot: int, dsts: list, buf) -> list[int]:
        """Copy every tensor into the slot; returns each one's word sum
        (checksum.py), taken on the device from the source where it lives there."""
        view = memoryview(buf).cast("B") if buf is not None else memoryview(b"")
        own = [k for k, a in enumerate(job.aliases) if a == k]     # tied tensors: the first one only
        srcs, dsts = [job.pairs[k] for k in own], [dsts[k] for k in own]
        if job.ready_event is None:
            copy_all(dsts, srcs, non_blocking=False)
            job.issued.set()
            job.copied.set()
            sums = self._host_sums(view, job.entries, own)
            return [sums[a] for a in job.aliases]
        # A new thread's current device is 0: on cuda:3 the side stream, the
        # events and the copies' streams must be cuda:3's.
        torch.cuda.set_device(self._device)
        pinned = self._pin(slot)
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        on_device: list[tuple[int, int]] = []     # (entry index, bytes summed on the device)
        parts = []
        timing = tuple(torch.cuda.Event(enable_timing=True) for _ in range(3))
        dev_sum = self._device_summed(job.entries, own)
        with torch.cuda.stream(self._stream):
            self._stream.wait_event(job.ready_event)
            timing[0].record(self._stream)
            # CPU sources are copied at once, before the pre-hook lets the optimizer go.
            # Into unregistered (pageable) pages a copy is synchronous: it returns when done.
            copy_all(dsts, srcs, non_blocking=pinned)
            timing[1].record(self._stream)
            for k, src in zip(own, srcs):
                if src.is_cuda and k in dev_sum:
                    part, whole = layout.word_sum(src)
                    if part is not None:      # else summed on the host from the slot
                        parts.append(part)
                        on_device.append((k, whole))
            host = None
            if parts:
                host = torch.empty(len(parts), dtype=torch.int64, pin_memory=True)
                host.copy_(torch.stack(parts), non_blocking=True)
            timing[2].record(self._stream)
            done = torch.cuda.Event()
            done.record(self._stream)
        job.done_event = done
        job.issued.set()
        done.synchronize()
        job.copied.set()
        n_parts = len(parts)
        del parts
        self._time_d2h(timing, sum(job.entries[k].nbytes for k, src in zip(own, srcs) if src.is_cuda), n_parts)
        sums = {}
        for (k, whole), value in zip(on_device, host.tolist() if host is not None else ()):
            e = job.entries[k]
            sums[k] = (value + checksum.tail_sum(view[e.offset + whole:e.offset + e.nbytes])) & checksum.MASK
        sums.update(self._host_sums(view, job.entries, [k for k in own if k not in sums]))
        return [sums[a] for a in job.aliases]

    def _host_sums(self, view, entries, ks: list[int]) -> dict[int, int]:
        """Word sums of those entries from the slot's bytes, the large ones
        spread over a few threads where the host has the cores for them."""
        if self._pool is None and sum(entries[k].nbytes for k in ks) >= 64 << 20 and _SUM_THREADS > 1:
            self._pool = concurrent.futures.ThreadPoolExecutor(_SUM_THREADS, thread_name_prefix="xpu-diag-sum")
        spans = [(entries[k].offset, entries[k].nbytes) for k in ks]
        return dict(zip(ks, checksum.span_sums(view, spans, self._pool)))

    def _time_d2h(self, timing, nbytes: int, sums: int) -> None:
        """The device-to-host copy's own time and the device sums' (CUDA
        events on the copy stream), for the bench's figures; the host-side
        copy_s also holds the wait for the training step to reach save()."""
        try:
            d2h, summed = timing[0].elapsed_time(timing[1]) / 1e3, timing[1].elapsed_time(timing[2]) / 1e3
        except Exception:    # not measurable (never fatal)
            return
        self.stats["d2h_s"] += d2h
        self.stats["device_sum_s"] += summed
        self.stats["device_sums"] += sums
        self.stats["d2h_bytes"] += nbytes
        self.stats["d2h_timed"] += 1

    def _device_summed(self, entries, own: list[int]) -> frozenset:
        """The entries whose word sums the device takes: all but the smallest
        (HOST_SUM_BYTES in all), which the host sums from the slot in less
        time than their kernels would cost the step (the layout, and so this
        choice, is the same step after step)."""
        if self._sum_plan is None or self._sum_plan[0] is not entries:
            host, total = set(), 0
            for k in sorted(own, key=lambda k: entries[k].nbytes):
                n = entries[k].nbytes
                if total + n > HOST_SUM_BYTES:
                    break
                host.add(k)
                total += n
            self._sum_plan = (entries, frozenset(own) - host)
        return self._sum_plan[1]

    def _pin(self, slot: int) -> bool:
        """Register the slot's whole mapping with CUDA once: D2H into it is
        then DMA, asynchronous, at full bandwidth. True if it is registered.
        Where it cannot be (a store on a disk-backed file system: Linux
        refuses long-term pins of such pages; the H100 run's pytest tmp_path),
        copies go through pageable memory: synchronous, slower, still correct."""
        buf = self._writer.mapping(slot)
        if buf is None:
            return False
        if slot not in self._pinned:
            self._pinned[slot] = (0, 0)
            ptr = torch.frombuffer(buf, dtype=torch.uint8).data_ptr()
            try:
                err = torch.cuda.cudart().cudaHostRegister(ptr, len(buf), HOST_REGISTER_PORTABLE)
                code = int(getattr(err, "value", err))
            except Exception as exc:     # a binding that refuses: unpinned
                code, err = -1, exc
            if code == 0:
                self._pinned[slot] = (ptr, len(buf))
            else:
                if not clear_cuda_error():
                    raise RuntimeError(f"CUDA stays in error after cudaHostRegister failed (error {code})")
                if self._said_pin:
                    return False
                self._said_pin = True
                self._say(f"cudaHostRegister of {len(buf) >> 20} MiB of the store {self.store_dir} failed "
                          f"(cudaError {code}: {cuda_error_name(err) if code > 0 else err}); copies into it "
                          f"are synchronous and the optimizer step waits for them. Put the store on tmpfs "
                          f"(/dev/shm; xpu_timer_launch does) for asynchronous copies")
        return self._pinned[slot][0] != 0

    def _unpin(self, slot: int) -> None:
        ptr, _ = self._pinned.pop(slot, (0, 0))
        if ptr:
            err = torch.cuda.cudart().cudaHostUnregister(ptr)
            if int(getattr(err, "value", err)) != 0:
                clear_cuda_error()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no snapshot is in flight; True if none is."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._jobs or not (self._thread and self._thread.is_alive()), timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Let the snapshot in flight commit (up to ``timeout``), then release."""
        self.wait(timeout)

    # -- restore ------------------------------------------------------------

    def restore(self) -> int | None:
        """Load the newest step every rank has (memory if this node kept it,
        else disk) into the registered objects and return it; None when there
        is none (a fresh start). Collective over the process group when one is
        initialised. Bad input (another world size, a corrupt manifest) ends
        the process with one line naming the file and the fix (exit code 2)."""
        result = self.restore_result()
        return result.step

    def restore_result(self) -> api.RestoreResult:
        if self._refused:   # part of the state was never registered: a restore would be partial
            return api.RestoreResult(None, "none", None, 0.0, 0)
        rank, world = self._dist()
        if self.replicated is None:
            self.replicated = not any(a.sharded or has_dtensor(a.state_dict()) for a in self.shared.values())
        try:
            result = _restore(self, rank, world)
        except (api.RecoverError, OSError) as exc:
            line = str(exc) if isinstance(exc, api.RecoverError) else (
                f"{exc.filename or self.persist_dir}: {exc.strerror or exc} while restoring; make it readable, "
                f"or point {api.ENV_PERSIST_DIR} elsewhere")
            self._log.write(f"xpu-diag recover: rank {rank}: {line}\n")
            self._log.flush()
            raise SystemExit(2) from None
        if result.step is not None:
            self._say(f"restored step {result.step} from {result.source} "
                      f"({result.bytes >> 20} MiB in {result.seconds:.2f} s)")
        return result

    # -- helpers --------------------------------------------------------------

    def _dist(self) -> tuple[int, int]:
        if self._rank is None:
            self._rank, self._world = dist_info(self.group)
        return self._rank, self._world

    def _say(self, line: str) -> None:
        rank = self._rank if self._rank is not None else os.environ.get("RANK", "?")
        self._log.write(f"xpu-diag recover: rank {rank}: {line}\n")
        self._log.flush()

    def _off(self, why: str) -> None:
        self.enabled = False
        if not self._said_off:
            self._said_off = True
            self._say(why)
