"""The collector's side: ask the agents for their rings, merge, write.

A request has an id, the agents connected when it was sent, and a deadline.
An event request (a HANG) ends in ``<event dir>/timeline.json``, written by a
thread of its own once every agent answered or the deadline passed, so the
watchdog never waits on a big merge. An on-demand request (GetTimeline)
ends in the RPC's reply. The file path comes from the event the collector
opened; an upload only names a request id this collector issued.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import uuid

import grpc

from diag.collector.events import UploadError
from diag.common import safe_dirs
from diag.common.ranks import fold
from diag.pb import collector_pb2 as pb
from diag.timeline import trace
from diag.timeline.api import DEFAULT_WAIT_S, TIMELINE_FILE

log = logging.getLogger("diag.collector")
MAX_PENDING = 16
MAX_ON_DEMAND = 2        # GetTimeline calls served at once; each holds a pool thread
MAX_WORLD = 1 << 20


@dataclasses.dataclass
class Pending:
    request_id: str
    expected: set[int]                 # node ranks asked
    deadline: float
    event_path: str | None             # None: on demand
    uploads: dict = dataclasses.field(default_factory=dict)   # node_rank -> TimelineUpload
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    finished: bool = False

    @property
    def complete(self) -> bool:
        return self.expected <= set(self.uploads)

    @property
    def missing(self) -> list[int]:
        return sorted(self.expected - set(self.uploads))


class TimelineGatherer:
    def __init__(self, job_id: str, registry, wait_s: float = DEFAULT_WAIT_S) -> None:
        self._job_id = job_id
        self._registry = registry
        self._wait_s = wait_s
        self._pending: dict[str, Pending] = {}
        self._lock = threading.Lock()
        self._on_demand = threading.BoundedSemaphore(MAX_ON_DEMAND)
        self.written: list[str] = []   # paths written, for tests and logs

    # -- requests -----------------------------------------------------------
    def request(self, request_id: str, now: float, last_ns: int = 0,
                event_path: str | None = None, wait_s: float | None = None) -> Pending:
        """Register the request, then send CollectTimeline to every agent."""
        pending = Pending(request_id, set(self._registry.node_ranks()),
                          now + (wait_s or self._wait_s), event_path)
        with self._lock:
            self._pending[request_id] = pending
            while len(self._pending) > MAX_PENDING:
                self._pending.pop(next(iter(self._pending)))
        self._registry.broadcast(pb.Command(collect_timeline=pb.CollectTimeline(
            request_id=request_id, last_ns=last_ns)))
        if not pending.expected:
            self._finish(pending)
        return pending

    def for_event(self, event_id: str, path: str, now: float) -> Pending:
        return self.request(event_id, now, 0, event_path=path)

    def on_demand(self, last_ns: int, wait_s: float | None) -> tuple[bytes, int, list[int]]:
        """Blocking: (trace JSON, ranks, nodes that did not answer). Raises
        UploadError(RESOURCE_EXHAUSTED) when too many are being served."""
        if not self._on_demand.acquire(blocking=False):
            raise UploadError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"{MAX_ON_DEMAND} timeline requests are already being served; retry")
        try:
            pending = self.request(f"on-demand-{uuid.uuid4().hex[:12]}", time.monotonic(),
                                   last_ns, wait_s=wait_s)
            pending.done.wait(max(0.0, pending.deadline - time.monotonic()))
            self._finish(pending)
            doc = self._document(pending)
            return trace.dumps(doc), len(doc["otherData"]["pids"]), pending.missing
        finally:
            self._on_demand.release()

    # -- uploads ------------------------------------------------------------
    def accept_upload(self, up: pb.TimelineUpload) -> int:
        """Validate and keep one agent's answer; returns its span count."""
        bad = grpc.StatusCode.INVALID_ARGUMENT
        with self._lock:
            pending = self._pending.get(up.request_id)
            if pending is None or pending.finished:
                raise UploadError(grpc.StatusCode.NOT_FOUND,
                                  f"timeline request {up.request_id[:64]!r} was not issued by this "
                                  f"collector or is already closed")
        if up.job_id and up.job_id != self._job_id:
            raise UploadError(bad, f"job id {up.job_id[:64]!r} is not this collector's job "
                                   f"{self._job_id!r}")
        for rank in up.ranks:
            if not 0 <= rank.rank < max(1, min(rank.world_size, MAX_WORLD)):
                raise UploadError(bad, f"rank {rank.rank} is out of range for world size "
                                       f"{rank.world_size}")
        with self._lock:
            pending.uploads[up.node_rank] = up
            complete = pending.complete
        if complete:
            self._finish(pending)
        return sum(len(r.spans) for r in up.ranks)

    def tick(self, now: float) -> None:
        """Close event requests past their deadline (from the watchdog)."""
        with self._lock:
            late = [p for p in self._pending.values() if not p.finished and now >= p.deadline]
        for pending in late:
            self._finish(pending)

    def close(self) -> None:
        """On the way out: write every open event's timeline now, with what
        has arrived, rather than lose it with the process."""
        with self._lock:
            open_events = [p for p in self._pending.values() if not p.finished and p.event_path]
        for pending in open_events:
            self._finish(pending, in_thread=False)

    # -- results ------------------------------------------------------------
    def _finish(self, pending: Pending, in_thread: bool = True) -> None:
        with self._lock:
            if pending.finished:
                return
            pending.finished = True
        pending.done.set()
        if pending.event_path is None:
            return
        if in_thread:
            threading.Thread(target=self._write_event, args=(pending,), daemon=True,
                             name="collector-timeline").start()
        else:
            self._write_event(pending)

    def _document(self, pending: Pending) -> dict:
        with self._lock:
            uploads = list(pending.uploads.values())
        doc = trace.build(uploads, job_id=self._job_id, request=pending.request_id,
                          nodes_missing=pending.missing)
        if not uploads:
            doc["otherData"]["error"] = ("no agent answered" if pending.expected else
                                         "no agent was connected") + " within the deadline"
        return doc

    def _write_event(self, pending: Pending) -> None:
        try:
            doc = self._document(pending)
            path = os.path.join(pending.event_path, TIMELINE_FILE)
            safe_dirs.write_file(path, trace.dumps(doc))
            self.written.append(path)
            missing = f"; nodes {fold(pending.missing)} did not answer" if pending.missing else ""
            log.info("event %s: %s with %d rank(s)%s", pending.request_id, TIMELINE_FILE,
                     len(doc["otherData"]["pids"]), missing)
        except safe_dirs.Unwritable as exc:   # a full disk, a planted link: one line, no traceback
            safe_dirs.say_once(log.warning, exc)
        except Exception:  # never take the collector down over one file
            log.exception("event %s: writing %s failed", pending.request_id, TIMELINE_FILE)
