"""The one reader of progress regions (docs/records.md); used by the node agent."""

from __future__ import annotations

import dataclasses
import glob
import mmap
import os
import stat

from diag.records import format as fmt


class RegionReader:
    """Consumes one region. Not thread-safe: the agent's sampler owns it."""

    def __init__(self, path: str):
        self.path = path
        # The agent writes read_idx back into the map: never through a link
        # planted in the directory, and only into a regular file.
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise fmt.RecordFormatError(f"{path}: not a regular file")
            size = st.st_size
            if size < fmt.HEADER_SIZE:
                raise fmt.RecordFormatError(f"{path}: {size} bytes, too short for a header")
            self._mm = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        self.header = fmt.Header.unpack(self._mm, path)
        if size < fmt.region_size(self.header.capacity):
            raise fmt.RecordFormatError(
                f"{path}: {size} bytes, but capacity {self.header.capacity} needs "
                f"{fmt.region_size(self.header.capacity)}")
        self._mask = self.header.capacity - 1

    def poll(self, limit: int | None = None) -> list[fmt.Record]:
        """Return the records published since the last poll and release their slots."""
        mm = self._mm
        read_idx = fmt.U64.unpack_from(mm, fmt.OFF_READ_IDX)[0]
        write_idx = fmt.U64.unpack_from(mm, fmt.OFF_WRITE_IDX)[0]
        if limit is not None:
            write_idx = min(write_idx, read_idx + limit)
        out = []
        for idx in range(read_idx, write_idx):
            offset = fmt.HEADER_SIZE + (idx & self._mask) * fmt.RECORD_SIZE
            out.append(fmt.Record.unpack_from(mm, offset))
        if write_idx != read_idx:
            fmt.U64.pack_into(mm, fmt.OFF_READ_IDX, write_idx)
        return out

    @property
    def dropped(self) -> int:
        return fmt.U64.unpack_from(self._mm, fmt.OFF_DROPPED)[0]

    @property
    def heartbeat_mono_ns(self) -> int:
        return fmt.U64.unpack_from(self._mm, fmt.OFF_HEARTBEAT)[0]

    @property
    def disabled(self) -> bool:
        return bool(fmt.U32.unpack_from(self._mm, fmt.OFF_FLAGS)[0] & fmt.HEADER_FLAG_DISABLED)

    def close(self) -> None:
        self._mm.close()


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
