"""Event directories: ``<timeline>/<job-id>/<event-id>/`` (docs/event-dir.md).

Paths come only from the configuration and validated integers: a StackDump
names an event id, which must be one this store issued and still accepts
uploads for, and a rank, which must lie in ``[0, world_size)``. hang.json is
written when the event opens and rewritten (throttled, by the watchdog) as
dump files arrive.
"""

from __future__ import annotations

import errno

import json
import logging
import os
import shlex
import threading
import time

import grpc

from diag.common import dumpnames, safe_dirs
from diag.common.ranks import fold
from diag.collector.config import Config
from diag.pb import collector_pb2 as pb

log = logging.getLogger("diag.collector")

# Uploads are accepted this long after a hang is declared (slow gdb dumps of
# many ranks); after that the event id is refused.
MIN_UPLOAD_WINDOW_S = 300.0
# Without StackDump.last, a rank counts as complete once it sent a file and
# no upload came for this long.
DUMP_QUIET_S = 3.0
MAX_EVENTS_KEPT = 16
INDENT_UP_TO_WORLD = 256
BIG_FLUSH_EVERY_S = 2.0
# ... and for the biggest, once per this many ranks a second: at 100,000 ranks
# a rewrite (24 MB of JSON) costs about a second of the GIL that ingest needs
# while the dumps come in (docs/collector.md "Scale"); every 10 s, not 2.
FLUSH_RANKS_PER_S = 10_000

FORMAT_TAGS = {
    pb.StackDump.FORMAT_PYSPY_JSON: dumpnames.PYSPY,
    pb.StackDump.FORMAT_GDB_TEXT: dumpnames.GDB,
    pb.StackDump.FORMAT_EU_STACK_TEXT: dumpnames.EU_STACK,
    pb.StackDump.FORMAT_ERROR_TEXT: dumpnames.ERROR,
}


class UploadError(Exception):
    """An upload that is refused; ``code`` is the gRPC status to abort with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def dump_filename(rank: int, world_size: int, fmt: int) -> str:
    """``rank00002-of-00004.py.json``; the arguments must be validated ints."""
    return dumpnames.dump_filename(rank, world_size, FORMAT_TAGS[fmt])


class HangEvent:
    """One declared hang: its directory, hang.json and the dumps received."""

    def __init__(self, event_id: str, path: str, doc: dict, expected: set[int], now: float, accept_s: float,
                 doc_name: str = dumpnames.HANG_JSON):
        self.event_id = event_id
        self.doc_name = doc_name          # hang.json, or slow.json for a SLOW event with stacks
        self.path = path
        self.world_size: int = doc["world_size"]
        self.declared = now
        self.accept_until = now + accept_s
        self.expected = expected          # ranks whose agents were asked for stacks
        self.killed = False
        self.stacks_said = False          # the STACKS line was printed
        self.declared_unix: float = doc.get("declared_unix", 0.0)
        self.last_words_expected: set[int] = set()   # node ranks asked to persist (PersistLastWords)
        self.last_words: dict[int, pb.LastWordsDone] = {}
        self.last_words_said = False
        self.refused = ""                 # why its directory could not be made; "": made
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

    def add_last_words(self, done: pb.LastWordsDone) -> None:
        with self._lock:
            self.last_words[done.node_rank] = done

    def last_words_in(self) -> bool:
        """Every agent asked to persist has answered (done, failed or nothing to do)."""
        with self._lock:
            return self.last_words_expected <= set(self.last_words)

    def last_words_line(self) -> str:
        """One line once the last words are in (or their deadline passed)."""
        with self._lock:
            got = dict(self.last_words)
            missing = sorted(self.last_words_expected - set(got))
        steps = sorted({d.step for d in got.values() if d.ok and d.step >= 0})
        parts = [f"{len([d for d in got.values() if d.ok and d.step >= 0])} node(s) on disk at step "
                 f"{', '.join(map(str, steps))}" if steps else "no node held a snapshot"]
        parts += [f"node {n}: {d.message}" for n, d in sorted(got.items()) if not d.ok]
        if missing:
            parts.append(f"no answer from node(s) {fold(missing)}")
        return f"LAST WORDS: event {self.event_id}: " + "; ".join(parts)

    def last_words_worth_saying(self, recover: bool) -> bool:
        """Whether the LAST WORDS line tells the user anything: always under
        --hang-action recover; otherwise only when some node held a snapshot
        or failed to persist one. A job that never opted in to recovery would
        read "no node held a snapshot" after every hang, as noise."""
        if recover:
            return True
        with self._lock:
            got = list(self.last_words.values())
        return any((d.ok and d.step >= 0) or not d.ok for d in got)

    def stacks_line(self) -> str:
        """One line for the log once the stacks are in (or the dump deadline
        passed): how many ranks, and the command that shows them."""
        with self._lock:
            got, missing = len(self._dumps), sorted(self.expected - set(self._dumps))
        if self.refused:
            return f"STACKS: event {self.event_id}: no stacks written ({self.refused})"
        where = shlex.quote(os.path.abspath(self.path))
        gap = f"; no stacks from ranks {fold(missing)}" if missing else ""
        return (f"STACKS: event {self.event_id}: stacks of {got} rank(s) are in{gap}; "
                f"see them with: stack-viewer --path {where}")

    def replace_doc(self, doc: dict) -> None:
        """A document judged again (failure.json as the ranks' statuses come
        in): written at the next flush, with the dumps received."""
        with self._lock:
            self._doc = doc
            self._dirty = True

    def flush(self, now: float | None = None, force: bool = False) -> None:
        """Rewrite hang.json if dumps arrived since the last write. For big
        jobs (megabytes of JSON) at most every BIG_FLUSH_EVERY_S seconds, or
        world_size / FLUSH_RANKS_PER_S for the biggest."""
        with self._lock:
            if not (self._dirty or force):
                return
            every = max(BIG_FLUSH_EVERY_S, self.world_size / FLUSH_RANKS_PER_S)
            if not force and now is not None and self.world_size > INDENT_UP_TO_WORLD \
                    and now - self._flushed < every:
                return
            self._flushed = now if now is not None else self._flushed
            self._doc["dumps"] = {str(r): sorted(n) for r, n in sorted(self._dumps.items())}
            self._doc["dumps_missing"] = sorted(self.expected - set(self._dumps))
            # Indented for people reading small jobs; compact past that (16k ranks: 7.9 MB -> 6.5 MB, 3x faster).
            data = (json.dumps(self._doc, indent=1) if self.world_size <= INDENT_UP_TO_WORLD
                    else dumps_sliced(self._doc)).encode()
            self._dirty = False
        try:
            safe_dirs.write_file(os.path.join(self.path, self.doc_name), data)
        except OSError as exc:   # a full disk, a planted link: one line, the hang is named anyway
            safe_dirs.say_once(log.warning, exc)


# hang.json's long lists and maps are encoded this many items at a time.
SLICE_ITEMS = 2000


def dumps_sliced(doc: dict) -> str:
    """``json.dumps(doc)``, the same text, its long lists and maps (the
    per-rank rows, "dumps") encoded a slice at a time with the GIL let go
    between slices: the C encoder keeps it for a whole call, 0.6-1 s at
    200,000 ranks (85 MB), and ingest, which needs it, would stop for that
    long in one piece at each rewrite."""
    parts = [f"{json.dumps(key)}: {_sliced(value)}" for key, value in doc.items()]
    return "{" + ", ".join(parts) + "}"


def _sliced(value) -> str:
    if not isinstance(value, (list, dict)) or len(value) <= SLICE_ITEMS:
        return json.dumps(value)
    mapping = isinstance(value, dict)
    items = list(value.items()) if mapping else value
    chunks = []
    for i in range(0, len(items), SLICE_ITEMS):
        part = items[i:i + SLICE_ITEMS]
        chunks.append(json.dumps(dict(part) if mapping else part)[1:-1])   # each slice without its brackets
        time.sleep(0)   # lets the GIL go
    return ("{%s}" if mapping else "[%s]") % ", ".join(chunks)


class EventStore:
    """Opens event directories and validates and stores uploaded dumps."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._job_dir = os.path.join(config.timeline_path, config.safe_job_id)
        self._events: dict[str, HangEvent] = {}
        self._issued: set[str] = set()   # ids handed out, their directory made or not
        self.refused: dict[str, str] = {}   # event id -> why its directory could not be made (one line)
        self._lock = threading.Lock()
        self._accept_s = max(MIN_UPLOAD_WINDOW_S, 2 * config.dump_timeout_s)

    def reserve_dir(self, declared_unix: float) -> tuple[str, str]:
        """Make a new, empty event directory; returns (event_id, path).

        The job directory and the event directory are made and checked by
        diag/common/safe_dirs.py: no link is followed, another user's
        directory is refused. A name already taken (a link planted under the
        next event id too) is skipped. When the directory cannot be made
        (refused, disk full), one line says why and the id and path are
        returned all the same: the HANG is still named, and each write
        into it fails with its own line."""
        base = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(declared_unix))
        for n in range(10000):
            event_id = base if n == 0 else f"{base}-{n}"
            path = os.path.join(self._job_dir, event_id)
            if event_id in self._issued:
                continue
            try:
                safe_dirs.make_dir(path)
            except FileExistsError:
                continue
            except OSError as exc:
                safe_dirs.say_once(log.warning, exc)
                self.refused[event_id] = str(exc).removesuffix("; nothing is written there")
            self._issued.add(event_id)
            return event_id, path
        raise OSError(f"no free event directory name for {base} under {self._job_dir}")

    def open_event(self, event_id: str, path: str, doc: dict, expected: set[int], now: float,
                   doc_name: str = dumpnames.HANG_JSON) -> HangEvent:
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
        try:
            safe_dirs.write_file(os.path.join(event.path, name), dump.content)
        except safe_dirs.Unwritable as exc:   # said here once, not once per rank by the servicer
            safe_dirs.say_once(log.warning, exc)
            # A refused directory holds for every rank's file (the agent sends
            # no more); a full disk is this file's size: a smaller one may fit.
            code = (grpc.StatusCode.RESOURCE_EXHAUSTED if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
                    else grpc.StatusCode.FAILED_PRECONDITION)
            raise UploadError(code, f"collector cannot write the dump: {exc}") from None
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
        if dump.format not in FORMAT_TAGS:
            raise UploadError(bad, f"unknown stack dump format {dump.format}")
        if len(dump.content) > self._config.max_dump_bytes:
            raise UploadError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"dump of {len(dump.content)} bytes exceeds --max-dump-size ({self._config.max_dump_bytes})")

    def accept_last_words(self, done: pb.LastWordsDone) -> None:
        """Record one agent's answer to PersistLastWords; NOT_FOUND for an event
        this collector did not issue, INVALID_ARGUMENT for another job's."""
        event = self._events.get(done.event_id)
        if event is None:
            raise UploadError(grpc.StatusCode.NOT_FOUND, f"event id {done.event_id[:64]!r} was not issued by this collector")
        if done.job_id and done.job_id not in (self._config.job_id, self._config.safe_job_id):
            raise UploadError(grpc.StatusCode.INVALID_ARGUMENT,
                              f"job id {done.job_id[:64]!r} is not this collector's job {self._config.job_id!r}")
        event.add_last_words(done)

    def events(self) -> list[HangEvent]:
        with self._lock:
            return list(self._events.values())


def stacks_not_written(line: str, why: str) -> str:
    """A verdict line whose event directory could not be made: its closing
    "; stacks in DIR/" would point at a directory refused and never written
    (another user's link), so it says they were not written, and why."""
    head, sep, _ = line.rpartition("; stacks in ")
    return f"{head if sep else line}; stacks not written ({why})"
