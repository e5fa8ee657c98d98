"""Event directories: ``<timeline>/<job-id>/<event-id>/`` (docs/event-dir.md).

Paths come only from the configuration and validated integers: a StackDump
names an event id, which must be one this store issued and still accepts
uploads for, and a rank, which must lie in ``[0, world_size)``. hang.json is
written when the event opens and rewritten (throttled, by the watchdog) as
dump files arrive.
"""

from __future__ import annotations

import json
import os
import threading
import time

import grpc

from diag.common.atomic import write_atomic
from diag.collector.config import Config
from diag.pb import collector_pb2 as pb

# Uploads are accepted this long after a hang is declared (slow gdb dumps of
# many ranks); after that the event id is refused.
MIN_UPLOAD_WINDOW_S = 300.0
# Without StackDump.last, a rank counts as complete once it sent a file and
# no upload came for this long.
DUMP_QUIET_S = 3.0
MAX_EVENTS_KEPT = 16
INDENT_UP_TO_WORLD = 256
BIG_FLUSH_EVERY_S = 2.0

FORMAT_FILES = {
    pb.StackDump.FORMAT_PYSPY_JSON: ("py", "json"),
    pb.StackDump.FORMAT_GDB_TEXT: ("gdb", "txt"),
    pb.StackDump.FORMAT_EU_STACK_TEXT: ("eu-stack", "txt"),
    pb.StackDump.FORMAT_ERROR_TEXT: ("error", "txt"),
}


class UploadError(Exception):
    """An upload that is refused; ``code`` is the gRPC status to abort with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def dump_filename(rank: int, world_size: int, fmt: int) -> str:
    """``rank00002-of-00004.py.json``; the arguments must be validated ints."""
    kind, ext = FORMAT_FILES[fmt]
    return f"rank{rank:05d}-of-{world_size:05d}.{kind}.{ext}"


class HangEvent:
    """One declared hang: its directory, hang.json and the dumps received."""

    def __init__(self, event_id: str, path: str, doc: dict, expected: set[int], now: float, accept_s: float,
                 doc_name: str = "hang.json"):
        self.event_id = event_id
        self.doc_name = doc_name          # hang.json, or slow.json for a SLOW event with stacks
        self.path = path
        self.world_size: int = doc["world_size"]
        self.declared = now
        self.accept_until = now + accept_s
        self.expected = expected          # ranks whose agents were asked for stacks
        self.killed = False
        self._doc = doc
        self._dumps: dict[int, list[str]] = {}
        self._complete: set[int] = set()
        self._last_upload = now
        self._dirty = True
        self._flushed = now
        self._lock = threading.Lock()

    def add_dump(self, rank: int, filename: str, last: bool, now: float) -> None:
        with self._lock:
            names = self._dumps.setdefault(rank, [])
            if filename not in names:
                names.append(filename)
            if last:
                self._complete.add(rank)
            self._last_upload = now
            self._dirty = True

    def dumps_in(self, now: float) -> bool:
        """Every expected rank finished (StackDump.last) or sent a file and went quiet."""
        with self._lock:
            quiet = now - self._last_upload >= DUMP_QUIET_S
            return all(r in self._complete or (quiet and r in self._dumps) for r in self.expected)

    def flush(self, now: float | None = None, force: bool = False) -> None:
        """Rewrite hang.json if dumps arrived since the last write. For big
        jobs (megabytes of JSON) at most every BIG_FLUSH_EVERY_S seconds."""
        with self._lock:
            if not (self._dirty or force):
                return
            if not force and now is not None and self.world_size > INDENT_UP_TO_WORLD \
                    and now - self._flushed < BIG_FLUSH_EVERY_S:
                return
            self._flushed = now if now is not None else self._flushed
            self._doc["dumps"] = {str(r): sorted(n) for r, n in sorted(self._dumps.items())}
            self._doc["dumps_missing"] = sorted(self.expected - set(self._dumps))
            # Indented for people reading small jobs; compact past that (16k ranks: 7.9 MB -> 6.5 MB, 3x faster).
            data = json.dumps(self._doc, indent=1 if self.world_size <= INDENT_UP_TO_WORLD else None).encode()
            self._dirty = False
        write_atomic(os.path.join(self.path, self.doc_name), data)


class EventStore:
    """Opens event directories and validates and stores uploaded dumps."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._job_dir = os.path.join(config.timeline_path, config.safe_job_id)
        self._events: dict[str, HangEvent] = {}
        self._lock = threading.Lock()
        self._accept_s = max(MIN_UPLOAD_WINDOW_S, 2 * config.dump_timeout_s)

    def reserve_dir(self, declared_unix: float) -> tuple[str, str]:
        """Make a new, empty event directory; returns (event_id, path)."""
        os.makedirs(self._job_dir, exist_ok=True)
        base = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(declared_unix))
        for n in range(10000):
            event_id = base if n == 0 else f"{base}-{n}"
            path = os.path.join(self._job_dir, event_id)
            try:
                os.mkdir(path)
                return event_id, path
            except FileExistsError:
                continue
        raise OSError(f"no free event directory name for {base} under {self._job_dir}")

    def open_event(self, event_id: str, path: str, doc: dict, expected: set[int], now: float,
                   doc_name: str = "hang.json") -> HangEvent:
        """Register the event: uploads are accepted from now on. The caller
        writes ``doc_name`` with ``event.flush(force=True)``."""
        event = HangEvent(event_id, path, doc, expected, now, self._accept_s, doc_name)
        with self._lock:
            self._events[event_id] = event
            while len(self._events) > MAX_EVENTS_KEPT:
                self._events.pop(next(iter(self._events)))
        return event

    def accept_upload(self, dump: pb.StackDump, now: float) -> str:
        """Validate and store one StackDump; returns the file name written.

        Raises UploadError: NOT_FOUND for an event id never issued or no longer
        accepting uploads, INVALID_ARGUMENT for a bad job id, rank, world size
        or format, RESOURCE_EXHAUSTED for content over --max-dump-size.
        """
        event = self._events.get(dump.event_id)
        if event is None or now > event.accept_until:
            raise UploadError(grpc.StatusCode.NOT_FOUND,
                              f"event id {dump.event_id[:64]!r} was not issued by this collector or no longer accepts uploads")
        self._validate(dump, event)
        name = dump_filename(dump.rank, event.world_size, dump.format)
        write_atomic(os.path.join(event.path, name), dump.content)
        event.add_dump(dump.rank, name, dump.last, now)
        return name

    def _validate(self, dump: pb.StackDump, event: HangEvent) -> None:
        bad = grpc.StatusCode.INVALID_ARGUMENT
        if dump.job_id and dump.job_id not in (self._config.job_id, self._config.safe_job_id):
            raise UploadError(bad, f"job id {dump.job_id[:64]!r} is not this collector's job {self._config.job_id!r}")
        if dump.world_size != event.world_size:
            raise UploadError(bad, f"world_size {dump.world_size} does not match event {event.event_id} "
                                   f"(world_size {event.world_size})")
        if not 0 <= dump.rank < event.world_size:
            raise UploadError(bad, f"rank {dump.rank} is out of range 0..{event.world_size - 1}")
        if dump.format not in FORMAT_FILES:
            raise UploadError(bad, f"unknown stack dump format {dump.format}")
        if len(dump.content) > self._config.max_dump_bytes:
            raise UploadError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"dump of {len(dump.content)} bytes exceeds --max-dump-size ({self._config.max_dump_bytes})")

    def events(self) -> list[HangEvent]:
        with self._lock:
            return list(self._events.values())
