"""The tracer's one completion watcher: END for ops whose work finishes later
(async ops, p2p, and the collectives DDP's reducer issues from C++).

END is stamped when the work is first *seen* done: by the caller's
``work.wait()`` returning (``Work.wait`` wrapped once, class-wide), by the
caller's next sync op, or by the watcher's thread, which looks every
``POLL_S`` while any op is pending and, once the training thread has been
quiet for ``QUIET_NS``, blocks on the oldest CPU future with the GIL released.

Looking never waits on the training thread. On a device op we only call
``work.is_completed()``: ``future.value()``, ``wait()`` and
``add_done_callback()`` each make a CUDA stream wait on NCCL's end event, and
serialised Megatron's compute behind its overlapped all-reduces. The thread
blocks only while the training thread is quiet, because a thread woken by
every op takes the GIL once per op (30 to 45 us per op on a Megatron-shaped
step, bench/tracer_async_step.py).

Ops of one group complete in issue order, so a lane is looked at from its
oldest op up to the first still running (a device lane first at its newest),
and a done op whose elders are not done waits for them, keeping its own
stamp; an elder that never reports completion is ended at a younger op's
stamp. docs/tracer.md, "Async work: the completion watcher", has the whole.
"""

from __future__ import annotations

import atexit
import collections
import threading
import time

from diag.tracer.marks import MARK, rename


# What reports an op's completion, per part.
FUTURE = 0       # a CPU future: done() / value()
DEVICE = 1       # a device op's work: is_completed() queries its end event
CPU_WORK = 2     # a CPU work without a future: wait() returning, or is_completed()


class _Pending:
    """One op whose END is not written yet."""

    __slots__ = ("record", "parts", "t_end", "failed", "on_cpu")

    def __init__(self, record, parts, on_cpu=True):
        self.record = record
        self.parts = parts          # (how, future or work) not yet seen done
        self.t_end = None           # monotonic ns when seen done
        self.failed = False
        self.on_cpu = on_cpu        # a CPU op: the training thread may look at it

    def reports(self) -> bool:
        """Whether each part reports its own completion (a CPU work may never)."""
        return all(how != CPU_WORK for how, _ in self.parts)


class Completions:
    """END for pending ops (see the module docstring). Thread-safe; never raises
    into the caller; holds no work past the op's END nor past interpreter exit."""

    POLL_S = 0.005
    QUIET_NS = 1_000_000

    def __init__(self, tracer):
        self.tracer = tracer
        self._cond = threading.Condition()
        self._lanes: dict[tuple, collections.deque] = {}   # (comm_id, kind) -> _Pending, start order
        self._unordered: list[_Pending] = []                # p2p: each ends on its own
        self._by_work: dict[int, list] = {}                 # id(work) -> its ops, for CPU works without a future
        self._count = 0
        self._cpu = 0               # of which CPU ops
        self._active_ns = 0         # when the training thread last added or waited on a CPU op
        self._thread = None
        self._closing = False
        self._idle = False          # the thread sleeps until notified
        # At exit: let go of every future and work (a gloo work still
        # referenced at interpreter teardown makes gloo abort the worker), and
        # stop the thread while the interpreter is whole.
        atexit.register(self.close)

    # -- called by the wrappers -------------------------------------------
    def add(self, record, works, on_cpu: bool) -> None:
        """Watch ``works`` (all of one op); END ``record`` once all are done.
        ``on_cpu``: the op's tensors are on the CPU, so its futures may be asked."""
        parts = []
        for work in works:
            if not on_cpu:
                parts.append((DEVICE, work))
                continue
            fut = _future_of(work)
            # The CPU work itself is not kept when it has a future: it holds its group.
            parts.append((CPU_WORK, work) if fut is None else (FUTURE, fut))
        entry = _Pending(record, parts, on_cpu)
        with self._cond:
            if record.seq:
                self._lanes.setdefault((record.comm_id, record.kind), collections.deque()).append(entry)
            else:
                self._unordered.append(entry)
            for how, part in parts:
                if how == CPU_WORK:    # several ops share one work under a coalescing manager
                    self._by_work.setdefault(id(part), []).append(entry)
            self._count += 1
            self._cpu += on_cpu
            if on_cpu:
                self._active_ns = record.t0
                # Only a CPU op's wait() says anything (on_wait); until the
                # first one, every wait() (an NCCL job's all) stays unwrapped:
                # the wrapper cost Megatron 5 us a call on an H100 host.
                _hook_work_wait()
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(target=self._run, daemon=True, name="xpu-diag-completions")
                self._thread.start()
            elif self._idle:
                self._cond.notify()

    def finished(self, record) -> None:
        """``record``'s op is done now (a sync call returned). Its END waits
        for its lane's elders still pending, if any, to keep the lane's order."""
        now = time.monotonic_ns()
        queue = self._lanes.get((record.comm_id, record.kind)) if record.seq else None
        if queue:
            entry = _Pending(record, [], False)
            entry.t_end = now
            with self._cond:
                queue.append(entry)
                self._count += 1
            if self._cpu:     # device elders: the thread's next look writes them and this one
                self.check(now)
        else:
            self.tracer.finish(record, False, now)

    def on_wait(self, work) -> None:
        """The caller's ``work.wait()`` returned: that work is done if it runs
        on the CPU. A device op's wait() only orders the caller's stream, so
        with only device ops pending there is nothing to look at: the
        training thread never queries NCCL (``is_completed()`` takes the
        communicator's error check; on a launch-bound step each query showed)."""
        if not self._cpu:   # every sync collective's wait() comes here: nothing to do
            return
        now = self._active_ns = time.monotonic_ns()
        with self._cond:
            for entry in self._by_work.pop(id(work), ()):
                entry.parts = [p for p in entry.parts if p[1] is not work]
                if not entry.parts and entry.t_end is None:
                    entry.t_end = now
        self.check(now)

    def check(self, now: int | None = None) -> None:
        """Stamp the ops seen done, and write the ENDs that are due."""
        now = time.monotonic_ns() if now is None else now
        with self._cond:
            if not self._count:
                return
            for queue in self._lanes.values():
                if not queue:
                    continue
                newest = queue[-1]
                if (not newest.on_cpu and newest.t_end is None
                        and not any(e.on_cpu and e.t_end is None for e in queue)):   # one backend's stream
                    # A group's device ops run in order on its one NCCL stream:
                    # the newest done, all are. One query for the lane, not
                    # one per op (each query lets go of the GIL, and getting it
                    # back costs the training thread a hand-over).
                    self._sweep(newest, now)
                    if newest.t_end is not None:
                        for entry in queue:
                            if entry.t_end is None:
                                entry.parts, entry.t_end = [], now
                        continue
                for entry in queue:
                    if entry.t_end is None:
                        self._sweep(entry, now)
                        if entry.t_end is None and entry.reports():
                            break    # this op still runs, and every younger one of its lane too
            for entry in self._unordered:
                if entry.t_end is None:
                    self._sweep(entry, now)
            due = self._due()
        for entry in due:
            self.tracer.finish(entry.record, entry.failed, entry.t_end)

    def pending(self) -> int:
        """Ops whose END is not written yet."""
        with self._cond:
            return self._count

    def close(self, join_s: float = 1.0) -> None:
        """END what completed, drop every future and work still held, and
        stop the thread."""
        try:
            self.check()
        except Exception:
            pass
        with self._cond:
            self._closing = True
            self._lanes.clear()
            self._unordered = []
            self._by_work.clear()
            self._count = self._cpu = 0
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(join_s)

    # -- the thread ---------------------------------------------------------
    def _run(self) -> None:
        try:
            while self.tracer.enabled:
                with self._cond:
                    while not self._count and not self._closing:
                        self._idle = True
                        self._cond.wait()
                    self._idle = False
                    if self._closing:
                        return
                # The first look once the caller may have gone quiet (an op
                # issued from C++, with no wait() of ours, wants its real end),
                # then every POLL_S: most ops are seen done by the caller.
                delay = self.QUIET_NS / 1e9
                while self._count and not self._closing and self.tracer.enabled:
                    time.sleep(delay)
                    delay = self.POLL_S
                    self.check()
                    self._wait_quiet()
        except Exception as exc:
            self.tracer.disable(f"watching completions failed: {exc!r}")

    def _wait_quiet(self) -> None:
        """While the training thread is quiet, block on the oldest CPU future
        and stamp its real end (:meth:`_quiet_future`)."""
        while not self._closing and self.tracer.enabled:
            fut = self._quiet_future()
            if fut is None:
                return
            try:
                fut.wait()   # releases the GIL; the op's error is the caller's to see
            except Exception:
                pass
            fut = None       # held no longer than the wait
            self.check()

    def _quiet_future(self):
        """The oldest pending CPU op's future, once the training thread has
        neither issued nor waited on a CPU op for ``QUIET_NS``; else None.
        Waiting on it stamps the op's real end (a DDP bucket all-reduce that
        the reducer waits on in C++, where no wait() of ours runs), and it wakes
        this thread once per such op: only while the training thread is in
        other work, not while it issues or waits on ops itself, when each
        wake-up would take the GIL from it once per op."""
        with self._cond:
            if not self._cpu or time.monotonic_ns() - self._active_ns < self.QUIET_NS:
                return None
            oldest = None
            for entry in self._entries():
                if entry.on_cpu and entry.t_end is None and (oldest is None or entry.record.t0 < oldest[0]):
                    fut = next((obj for how, obj in entry.parts if how == FUTURE), None)
                    if fut is not None:
                        oldest = (entry.record.t0, fut)
            return None if oldest is None else oldest[1]

    # -- under the lock -------------------------------------------------------
    def _entries(self):
        for queue in self._lanes.values():
            yield from queue
        yield from self._unordered

    def _sweep(self, entry, now) -> None:
        left = []
        for part in entry.parts:
            how, obj = part
            if how == FUTURE:
                if obj.done():
                    entry.failed = entry.failed or _failed(obj)
                    continue
            elif _work_completed(obj):
                if how == CPU_WORK:
                    self._forget(obj, entry)
                continue
            left.append(part)
        entry.parts = left
        if not left:
            entry.t_end = now

    def _forget(self, work, entry) -> None:
        entries = self._by_work.get(id(work))
        if entries is not None:
            entries[:] = [e for e in entries if e is not entry]
            if not entries:
                del self._by_work[id(work)]

    def _due(self) -> list:
        due = []
        for queue in self._lanes.values():
            while queue:
                head = queue[0]
                if head.t_end is None:
                    if head.reports():
                        break
                    later = [e.t_end for e in queue if e.t_end is not None]
                    if not later:
                        break
                    # Nothing reports its completion, and a younger op of the
                    # lane is done: it is done too (docs/records.md), at the latest then.
                    head.t_end = min(later)
                    for _how, part in head.parts:
                        self._forget(part, head)
                due.append(queue.popleft())
        done = [e for e in self._unordered if e.t_end is not None]
        if done:
            self._unordered = [e for e in self._unordered if e.t_end is None]
            due += done
        self._count -= len(due)
        self._cpu -= sum(e.on_cpu for e in due)
        return due


def _future_of(work):
    try:
        return work.get_future()
    except Exception:   # gloo's send/recv, reduce_scatter_single: no future
        return None


def _work_completed(work) -> bool:
    try:
        return work.is_completed()
    except Exception:
        return True     # cannot tell: END now rather than never


def _failed(fut) -> bool:
    try:
        fut.value()     # done already: returns at once, or raises the op's error
        return False
    except Exception:
        return True


_watchers: dict = {}


def finished(tracer, record) -> None:
    """END a sync op now, after its lane's pending elders if it has any."""
    found = _watchers.get(id(tracer))
    if found is None or found.tracer is not tracer:
        tracer.finish(record)       # nothing was ever pending: no watcher needed
    else:
        found.finished(record)


def watcher(tracer) -> Completions:
    """The one watcher of ``tracer``."""
    found = _watchers.get(id(tracer))
    if found is None or found.tracer is not tracer:
        found = _watchers[id(tracer)] = Completions(tracer)
    return found


def _hook_work_wait() -> None:
    """Wrap ``Work.wait`` once per process; it tells the active tracer's watcher."""
    from torch.distributed.distributed_c10d import Work
    if hasattr(Work.wait, MARK):
        return
    original = Work.wait

    def wait(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        for found in list(_watchers.values()):
            try:
                if found.tracer.enabled:
                    found.on_wait(self)
            except Exception as exc:   # never into training code; said once, as any tracer failure
                found.tracer.disable(f"watching a work's wait() failed: {exc!r}")
        return result

    setattr(wait, MARK, original)
    Work.wait = rename(wait)
