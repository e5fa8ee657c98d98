"""The one reader of progress regions (docs/records.md); used by the node agent.

A region is written by a worker, and a crashing or buggy worker can leave any
bytes in it, or shrink the file. So the reader trusts none of it: the header is
bounded when the region is opened (a region that fails is refused, never read),
the indices are bounded on every poll, a poll reads at most ``limit`` records,
and records whose event or kind no producer writes are skipped and counted. It
reads with pread/pwrite, never through a mapping: a file a worker truncates
gives a short read here, where a mapping would kill the agent with SIGBUS.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import stat

from diag.records import format as fmt

# Records one poll reads at most (2 MiB): the sampler holds the agent's lock
# while it polls, so one region's backlog never stalls the rest of the node.
POLL_LIMIT = 16384
# A count no ring can reach: a larger one is garbage, and summing it with the
# other regions' would overflow the report's uint64.
_MAX_COUNT = 1 << 53


class RegionReader:
    """Consumes one region. Not thread-safe: the agent's sampler owns it.

    Counters the caller may report: ``lost`` (records passed over because the
    write index moved further than the ring holds), ``bad_records`` (records
    skipped for an event or kind no producer writes), ``backlog`` and
    ``pending`` (published but unread before and after the last poll, at most
    ``capacity``), ``index_problem`` (the last index
    anomaly, "" if none)."""

    def __init__(self, path: str):
        self.path = path
        # The agent writes read_idx back: never through a link planted in the
        # directory, and only into a regular file.
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise fmt.RecordFormatError(f"{path}: not a regular file")
            size = st.st_size
            if size < fmt.HEADER_SIZE:
                raise fmt.RecordFormatError(f"{path}: {size} bytes, too short for a header")
            self.header = fmt.Header.unpack(os.pread(fd, fmt.HEADER_SIZE, 0), path)
            if size != fmt.region_size(self.header.capacity):
                raise fmt.RecordFormatError(
                    f"{path}: {size} bytes, but capacity {self.header.capacity} makes "
                    f"{fmt.region_size(self.header.capacity)}")
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._mask = self.header.capacity - 1
        # Our own read index: the one in the file is only told to the writer,
        # never believed (the worker can overwrite it).
        self._read = self._told = self._u64(fmt.OFF_READ_IDX)
        # Where the last believable poll ended; while the write index is
        # suspect (it jumped past the ring), neither moved nor told the writer.
        self._sane = self._read
        self._suspect = False
        self._behind = False   # the last poll saw the index behind the last believable one
        self.lost = 0
        self.bad_records = 0
        self.pending = 0
        self.backlog = 0
        self.index_problem = ""

    def _u64(self, offset: int, field=fmt.U64) -> int:
        raw = os.pread(self._fd, field.size, offset)
        if len(raw) != field.size:
            raise fmt.RecordFormatError(f"{self.path}: shrunk to {offset + len(raw)} bytes")
        return field.unpack(raw)[0]

    def drain(self) -> list[fmt.Record]:
        """Every record published so far, in as many polls as it takes (tests
        and tools that read a finished region whole; the agent polls bounded)."""
        out = []
        while True:
            got = self.poll()
            if not got:
                return out
            out += got

    def poll(self, limit: int = POLL_LIMIT) -> list[fmt.Record]:
        """Return up to ``limit`` records published since the last poll and
        release their slots. Raises RecordFormatError if the file shrank."""
        write_idx = self._u64(fmt.OFF_WRITE_IDX)
        start = self._bound(write_idx)
        end = max(start, min(write_idx, start + max(0, limit)))
        out = self._read_slots(start, end) if end > start else []
        self.backlog = max(0, write_idx - start)
        self.pending = max(0, write_idx - end)
        self._read = end
        if not self._suspect:
            self._sane = end
            if end != self._told:   # releases the slots to the writer
                os.pwrite(self._fd, fmt.U64.pack(end), fmt.OFF_READ_IDX)
                self._told = end
        return out

    def _bound(self, write_idx: int) -> int:
        """Where this poll starts reading, given the writer's ``write_idx``.

        A writer publishes at most ``capacity`` records ahead of the reader
        and never goes back. Further ahead than the ring holds: skip to the
        newest ``capacity`` records and count the rest lost; the index is
        suspect until it moves again. Behind: the last one was garbage (a
        writer republishes its own count with its next record); resume where
        the last believable poll ended once the writer is past it, else from
        the writer's index. Behind even the last believable poll, it is first
        read again at the next poll: a torn read seen once (a count being
        stored as the reader read it) moves nothing; rewinding to it would
        read slots the writer has since reused, an op's START a second time."""
        cap = self.header.capacity
        problem = ""
        if write_idx < self._sane and not self._behind:
            self._behind = True
            self.index_problem = ""
            return self._read
        self._behind = False
        if write_idx < self._read:
            resume = self._sane if self._sane <= write_idx else write_idx
            problem = f"write index went back from {self._read} to {write_idx}; read on from {resume}"
            self._read = resume
            self._suspect = False
        elif self._suspect and write_idx > self._read:
            self._suspect = False   # the writer goes on from where it jumped to
        if write_idx - self._read > cap:
            skip = write_idx - cap
            self.lost += skip - self._read
            problem = (f"write index {write_idx} is {write_idx - self._read} records ahead of "
                       f"the reader, more than the ring's {cap}: skipped to the newest {cap}")
            self._read = skip
            self._suspect = True
        self.index_problem = problem
        return self._read

    def _read_slots(self, start: int, end: int) -> list[fmt.Record]:
        """Records [start, end) (end - start <= capacity), at most two preads."""
        first = start & self._mask
        n = end - start
        head = min(n, self.header.capacity - first)
        raw = os.pread(self._fd, head * fmt.RECORD_SIZE, fmt.HEADER_SIZE + first * fmt.RECORD_SIZE)
        if n > head:
            raw += os.pread(self._fd, (n - head) * fmt.RECORD_SIZE, fmt.HEADER_SIZE)
        if len(raw) != n * fmt.RECORD_SIZE:
            raise fmt.RecordFormatError(f"{self.path}: shrunk while being read")
        out = []
        kinds = fmt.EVENT_KINDS
        for offset in range(0, len(raw), fmt.RECORD_SIZE):
            # event and kind are the first two bytes: checked before unpacking
            allowed = kinds.get(raw[offset])
            if allowed is None or raw[offset + 1] not in allowed:
                self.bad_records += 1
                continue
            out.append(fmt.Record.unpack_from(raw, offset))
        return out

    def _live_u64(self, offset: int, field=fmt.U64) -> int:
        try:
            return self._u64(offset, field)
        except (OSError, ValueError):   # shrunk: the next poll says so
            return 0

    @property
    def dropped(self) -> int:
        """The writer's drop count (bounded: a garbage one cannot overflow a sum)."""
        return min(_MAX_COUNT, self._live_u64(fmt.OFF_DROPPED))

    @property
    def heartbeat_mono_ns(self) -> int:
        return self._live_u64(fmt.OFF_HEARTBEAT)

    @property
    def disabled(self) -> bool:
        return bool(self._live_u64(fmt.OFF_FLAGS, fmt.U32) & fmt.HEADER_FLAG_DISABLED)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclasses.dataclass
class ScanResult:
    readers: dict[str, RegionReader]
    errors: dict[str, str]


def scan(directory: str, known: dict[str, RegionReader]) -> ScanResult:
    """Open regions that appeared in ``directory`` since the last scan.

    Temp files (``.tmp-*``) are skipped: they are regions still being created.
    Unreadable regions are reported by path, never raised.
    """
    readers = dict(known)
    errors = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.ring"))):
        if path in readers:
            continue
        try:
            readers[path] = RegionReader(path)
        except (OSError, ValueError) as exc:
            errors[path] = str(exc)
    return ScanResult(readers, errors)
