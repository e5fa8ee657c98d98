"""The tracer's one completion watcher: END for ops whose work finishes later.

Async ops (``async_op=True``, isend/irecv, batch_isend_irecv) and the
collectives DDP's reducer issues from C++ (dispatch.py) return a work before
it is done. Their END is stamped when the work is seen done, by whichever of
these sees it first:

- **CPU futures** (every gloo collective but a few): the watcher's one thread
  blocks in ``future.wait()`` on the oldest pending one, with the GIL
  released, and stamps the moment it returns. That is the op's real end, late
  only by the time the thread takes to get the GIL back (nothing when the
  training thread is in C++, as in backward). gloo's own threads never run
  our code: a done-callback there would hold the next collective until the
  training thread lets the GIL go (up to the 5 ms switch interval). The
  thread looks first ``GATE_S`` (0.5 ms) after work appears: an op that ends
  sooner, unseen by the caller, reads up to that long.
- **The caller's ``work.wait()`` returning** (``Work.wait`` is wrapped once,
  class-wide). For works without a future whose ``is_completed()`` never
  turns true (gloo's send/recv, and its ``reduce_scatter_single``, whose work
  is done once ``wait()`` returns) this is the only signal there is.
- **``is_completed()`` / ``done()``**, checked after every wake-up, at every
  new op on the calling thread, and every ``POLL_S`` while only works without
  a future are pending.
- **Futures of device ops** (NCCL): a done-callback, as NCCL completes them on
  the issuing thread. Blocking on one from our thread would make our thread's
  current stream wait on it: a change to the user's streams.

The time an op took is from its START to that stamp, whenever END is written.

END order. Collectives of one group end in the order they started
(docs/records.md; the agent drops an older op of the lane when a newer one
ends). A done op whose elders are not done waits for them, keeping its own
stamp. An elder with no future to wait on, whose completion only wait() or
is_completed() would show, does not hold its lane for good: when a younger
op of its lane is done, it is ended at that op's stamp. p2p ops end each as
it completes.
"""

from __future__ import annotations

import atexit
import collections
import threading
import time

MARK = "__xpu_diag_original__"


class _Pending:
    """One op whose END is not written yet."""

    __slots__ = ("record", "parts", "blocking", "t_end", "failed")

    def __init__(self, record, parts, blocking):
        self.record = record
        self.parts = parts          # futures and works not yet seen done
        self.blocking = blocking    # its parts are CPU futures the thread may wait on
        self.t_end = None           # monotonic ns when seen done
        self.failed = False

    def has_future(self) -> bool:
        return any(_is_future(p) for p in self.parts)


class Completions:
    """END for pending ops (see the module docstring). Thread-safe; never raises
    into the caller; holds no work past the op's END nor past interpreter exit."""

    POLL_S = 0.005
    GATE_S = 0.0005
    LINGER_S = 0.005

    def __init__(self, tracer):
        self.tracer = tracer
        self._cond = threading.Condition()
        self._lanes: dict[tuple, collections.deque] = {}   # (comm_id, kind) -> _Pending, start order
        self._unordered: list[_Pending] = []                # p2p: each ends on its own
        self._by_work: dict[int, _Pending] = {}             # id(work) -> op, for works without a future
        self._count = 0
        self._thread = None
        self._closing = False
        self._idle = False          # the thread sleeps until notified
        _hook_work_wait()
        # At exit: let go of every future and work (a gloo work still
        # referenced at interpreter teardown makes gloo abort the worker), and
        # get the thread out of future.wait() while the interpreter is whole.
        # A daemon thread that comes back from a call that let go of the GIL
        # after finalisation has begun is ended with pthread_exit inside
        # pybind11's GIL guard, a destructor: std::terminate, "terminate called
        # without an active exception".
        atexit.register(self.close)

    # -- called by the wrappers -------------------------------------------
    def add(self, record, works, on_cpu: bool) -> None:
        """Watch ``works`` (all of one op); END ``record`` once all are done.
        ``on_cpu``: the op's tensors are on the CPU, so its futures may be waited on."""
        parts, device_futures = [], []
        for work in works:
            fut = _future_of(work)
            if fut is None:
                parts.append(work)
            elif on_cpu:
                parts.append(fut)   # the work itself is not kept: it holds its group
            else:
                parts.append(fut)
                device_futures.append(fut)
        entry = _Pending(record, parts, on_cpu)
        with self._cond:
            if record.seq:
                self._lanes.setdefault((record.comm_id, record.kind), collections.deque()).append(entry)
            else:
                self._unordered.append(entry)
            for part in parts:
                if not _is_future(part):
                    self._by_work[id(part)] = entry
            self._count += 1
            alone = self._count == 1 and not device_futures
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(target=self._run, daemon=True, name="xpu-diag-completions")
                self._thread.start()
            elif self._idle:
                self._cond.notify()
        for fut in device_futures:
            fut.add_done_callback(lambda f: self.check())
        if alone:
            return   # nothing older to stamp, and an op just issued is seldom done yet
        self.check()

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
            self.check(now)
        else:
            self.tracer.finish(record, False, now)

    def on_wait(self, work) -> None:
        """The caller's ``work.wait()`` returned: that work is done."""
        if not self._count:   # every sync collective's wait() comes here: nothing to do
            return
        now = time.monotonic_ns()
        with self._cond:
            entry = self._by_work.pop(id(work), None)
            if entry is not None:
                entry.parts = [p for p in entry.parts if p is not work]
                if not entry.parts and entry.t_end is None:
                    entry.t_end = now
        self.check(now)

    def check(self, now: int | None = None) -> None:
        """Stamp every op seen done, and write the ENDs that are due."""
        now = time.monotonic_ns() if now is None else now
        with self._cond:
            if not self._count:
                return
            for entry in self._entries():
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
        stop the thread (waiting up to ``join_s`` for it to leave a wait on an
        op that has not completed)."""
        try:
            self.check()
        except Exception:
            pass
        with self._cond:
            self._closing = True
            self._lanes.clear()
            self._unordered = []
            self._by_work.clear()
            self._count = 0
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(join_s)

    # -- the thread ---------------------------------------------------------
    def _run(self) -> None:
        # Every wake-up of this thread costs the training thread a GIL
        # hand-over (tens of us on a many-core host). So it looks GATE_S after
        # work appears and waits on an op's future only once the op is GATE_S
        # old (most ops that end sooner are seen done by the calling thread
        # itself: its wait(), its next op), and once nothing is pending
        # it lingers LINGER_S, looking every GATE_S, before it sleeps until
        # notified: a stream of ops wakes it every GATE_S, not once per op.
        try:
            while self.tracer.enabled:
                with self._cond:
                    self._idle = True
                    while not self._count and not self._closing:
                        self._cond.wait()
                    self._idle = False
                    if self._closing:
                        return
                quiet = 0.0
                while quiet < self.LINGER_S and self.tracer.enabled and not self._closing:
                    time.sleep(self.GATE_S)
                    quiet = 0.0 if self._watch() else quiet + self.GATE_S
        except Exception as exc:
            self.tracer.disable(f"watching completions failed: {exc!r}")

    def _watch(self) -> bool:
        """END what is done, waiting on the oldest CPU future while any op is
        pending; True if any was."""
        busy = False
        while not self._closing:
            self.check()
            with self._cond:
                if not self._count:
                    break
                busy = True
                fut, t0 = self._oldest_blocking_future()
            if fut is not None:
                early = self.GATE_S - (time.monotonic_ns() - t0) / 1e9
                if early > 0:    # the caller may yet see it end: a wake-up per op is what costs
                    fut = None
                    time.sleep(early)
                    continue
                try:
                    fut.wait()   # releases the GIL; an op's error is the caller's to see
                except Exception:
                    pass
                fut = None       # held no longer than the wait
            else:
                time.sleep(self.POLL_S)
        return busy

    # -- under the lock -------------------------------------------------------
    def _entries(self):
        for queue in self._lanes.values():
            yield from queue
        yield from self._unordered

    def _oldest_blocking_future(self):
        """(future, its op's START time) of the oldest op the thread may wait on; (None, 0) if none."""
        oldest = None
        for entry in self._entries():
            if entry.blocking and entry.t_end is None and (oldest is None or entry.record.t0 < oldest[0]):
                fut = next((p for p in entry.parts if _is_future(p)), None)
                if fut is not None:
                    oldest = (entry.record.t0, fut)
        return (None, 0) if oldest is None else (oldest[1], oldest[0])

    def _sweep(self, entry, now) -> None:
        left = []
        for part in entry.parts:
            if _is_future(part):
                if part.done():
                    entry.failed = entry.failed or _failed(part)
                    continue
            elif _work_completed(part):
                self._by_work.pop(id(part), None)
                continue
            left.append(part)
        entry.parts = left
        if not left:
            entry.t_end = now

    def _due(self) -> list:
        due = []
        for queue in self._lanes.values():
            while queue:
                head = queue[0]
                if head.t_end is None:
                    later = [e.t_end for e in queue if e.t_end is not None]
                    if not later or head.has_future():
                        break
                    # No future to wait on, and a younger op of the lane is
                    # done: it is done too (docs/records.md), at the latest then.
                    head.t_end = min(later)
                    for part in head.parts:
                        self._by_work.pop(id(part), None)
                due.append(queue.popleft())
        done = [e for e in self._unordered if e.t_end is not None]
        if done:
            self._unordered = [e for e in self._unordered if e.t_end is None]
            due += done
        self._count -= len(due)
        return due


def _future_of(work):
    try:
        return work.get_future()
    except Exception:   # gloo's send/recv, reduce_scatter_single: no future
        return None


def _is_future(part) -> bool:
    return hasattr(part, "done")


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
        try:
            for found in list(_watchers.values()):
                if found.tracer.enabled:
                    found.on_wait(self)
        except Exception:
            pass
        return result

    from diag.tracer.collectives import rename
    setattr(wait, MARK, original)
    Work.wait = rename(wait)
