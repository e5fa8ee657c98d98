"""The Python producer side of a progress region (docs/records.md).

Used by the Python tracer inside training processes, so it must never block
and never raise on the hot path: a full ring drops the record and counts it.

What a full ring may drop (docs/records.md, "When the ring is full"): never
the END of an op whose START it published, so the agent never sees an op in
flight that ended. Every published START holds a slot for its END until the
END is written; a START goes in only where there is room for it and for the
ENDs of every op still open. Records of anything but a collective or p2p op
(host functions, GEMMs, counts) also leave the last quarter of the ring to
those, so a host function called faster than the agent drains cannot crowd
out the ops whose seqs the hang rules compare.
"""

from __future__ import annotations

import errno
import mmap
import os
import tempfile
import threading
import time

from diag.common import envnames
from diag.records import format as fmt


class RecordWriter:
    """Single-region writer. Thread-safe: Python threads share one region.

    A lock serialises writers inside this process; the agent, the only other
    party, never takes it, so a stalled agent can never stall training.
    """

    def __init__(self, directory: str, *, producer: int, rank: int, local_rank: int,
                 world_size: int, capacity: int = fmt.DEFAULT_CAPACITY, pid: int | None = None):
        if capacity <= 0 or capacity & (capacity - 1):
            raise ValueError(f"capacity {capacity} must be a power of two")
        self.capacity = capacity
        self._mask = capacity - 1
        self._lock = threading.Lock()
        self._next_op_id = 1
        self._write_idx = 0
        self._read_idx_seen = 0
        self._dropped = 0
        self._open = 0   # STARTs published whose END is not written: a slot held for each
        # A record goes in while records unread + slots held stay under its
        # limit: the ring for a collective or p2p op, a quarter short for the rest.
        solo = capacity - capacity // 4
        self._limits = [solo] * (max(fmt.OP_KINDS) + 1)   # by kind: one list index on the hot path
        for kind in fmt.COMM_LANES:
            self._limits[kind] = capacity
        # A START needs one slot more than its limit leaves: its END's.
        self._start_limits = [limit - 1 for limit in self._limits]
        self._names: dict[str, bytes] = {}
        pid = os.getpid() if pid is None else pid
        header = fmt.Header(capacity, pid, rank, local_rank, world_size, producer, 0,
                            time.time_ns(), time.monotonic_ns())
        self.path = os.path.join(directory, fmt.region_filename(producer, rank, pid))
        self._mm = _create_region(directory, self.path, header)
        # The header's counters as 8-byte words: one aligned store each. struct's
        # pack_into zero-fills its bytes before writing them, and the agent read
        # write_idx as 0 between the two (a ring that then went dead).
        self._words = memoryview(self._mm)[:fmt.HEADER_SIZE].cast("Q")

    def start(self, kind: int, name: str, comm_id: int = 0, seq: int = 0,
              nbytes: int = 0, flops: int = 0, comm_rank: int = -1, comm_size: int = 0,
              flags: int = 0) -> int:
        """Record the start of an op; returns the id to hand to :meth:`end`:
        its op id, negated when the ring had no room for the START (the END
        then goes in only if there is room, as a record of its own).

        Arguments may be positional: the tracer calls this on every traced
        collective, and keyword passing costs it hundreds of ns."""
        limit = self._start_limits[kind]
        with self._lock:
            op_id = self._next_op_id
            self._next_op_id += 1
            if self._write_idx - self._read_idx_seen + self._open >= limit and not self._room(limit):
                return -op_id
            self._open += 1
            self._put(fmt.EVENT_START, kind, flags, comm_rank, op_id, comm_id, seq,
                      time.monotonic_ns(), 0, nbytes, flops, 1, comm_size, name)
        return op_id

    def end(self, op_id: int, kind: int, name: str, duration_ns: int, comm_id: int = 0,
            seq: int = 0, nbytes: int = 0, flops: int = 0, comm_rank: int = -1,
            comm_size: int = 0, failed: bool = False, t_mono_ns: int | None = None) -> None:
        """Record an END; ``op_id`` is what :meth:`start` returned (0: an END
        with no START, as the optimizer step's); ``t_mono_ns`` is when the op
        ended (now when None). The END of a published START always goes in:
        its slot was held."""
        flags = fmt.FLAG_FAILED if failed else 0
        with self._lock:
            if op_id > 0 and self._open:
                self._open -= 1      # the slot it held is its own
            else:
                op_id = -op_id if op_id < 0 else op_id
                if self._full(kind):
                    return
            self._put(fmt.EVENT_END, kind, flags, comm_rank, op_id, comm_id, seq,
                      time.monotonic_ns() if t_mono_ns is None else t_mono_ns,
                      duration_ns, nbytes, flops, 1, comm_size, name)

    def count(self, kind: int, name: str, n: int) -> None:
        with self._lock:
            if self._full(kind):
                return
            self._put(fmt.EVENT_COUNT, kind, 0, -1, 0, 0, 0, time.monotonic_ns(), 0, 0, 0,
                      n, 0, name)

    def group(self, comm_id: int, name: str, comm_rank: int, comm_size: int) -> None:
        """Name a process group once (EVENT_GROUP): ``comm_id`` is its id."""
        with self._lock:
            if self._full(fmt.KIND_COLLECTIVE):
                return
            self._put(fmt.EVENT_GROUP, fmt.KIND_COLLECTIVE, 0, comm_rank, 0, comm_id, 0,
                      time.monotonic_ns(), 0, 0, 0, 1, comm_size, name)

    def device(self, ordinal: int, visible: str = "", uuid: str = "", pci: int | None = None) -> None:
        """Say which CUDA device this rank uses (EVENT_DEVICE, docs/records.md):
        its ordinal, the CUDA_VISIBLE_DEVICES entry of it, and the UUID / PCI
        address where the CUDA runtime gave them."""
        hi, lo = fmt.pack_uuid(uuid) if uuid else (0, 0)
        flags = (fmt.DEVICE_HAS_UUID if (hi or lo) else 0) | (fmt.DEVICE_HAS_PCI if pci is not None else 0)
        with self._lock:
            if self._full(0):
                return
            self._put(fmt.EVENT_DEVICE, 0, flags, ordinal, 0, hi, lo, time.monotonic_ns(), 0,
                      pci or 0, 0, 1, 0, visible)

    def set_disabled(self) -> None:
        """Mark the region as switched off, so the agent can say so."""
        flags = fmt.U32.unpack_from(self._mm, fmt.OFF_FLAGS)[0]
        fmt.U32.pack_into(self._mm, fmt.OFF_FLAGS, flags | fmt.HEADER_FLAG_DISABLED)

    @property
    def dropped(self) -> int:
        return self._dropped

    @property
    def open_ops(self) -> int:
        """STARTs published whose END is not written yet (a slot held for each)."""
        return self._open

    def close(self) -> None:
        with self._lock:
            self._words.release()
            self._mm.close()

    def _full(self, kind: int) -> bool:
        """No room for one record of ``kind`` beside the slots held; counts
        the drop. Caller holds the lock."""
        limit = self._limits[kind]
        return self._write_idx - self._read_idx_seen + self._open >= limit and not self._room(limit)

    def _room(self, limit: int) -> bool:
        """Whether unread records and held slots are under ``limit`` once the
        agent's index is read again; counts a drop when not. Only called when
        the last view said no: one shared-memory read saved per record on the
        common path. Caller holds the lock."""
        self._read_idx_seen = self._words[_READ_IDX]
        if self._write_idx - self._read_idx_seen + self._open < limit:
            return True
        self._dropped += 1
        self._words[_DROPPED] = self._dropped
        return False

    def _put(self, event, kind, flags, comm_rank, op_id, comm_id, seq, t_ns, dur, nbytes,
             flops, count, comm_size, name) -> None:
        """Write one record into the next slot and publish it; the caller
        checked there is room and holds the lock."""
        mm = self._mm
        encoded = self._names.get(name)
        if encoded is None:
            encoded = fmt.encode_name(name)
            if len(self._names) < 4096:  # op names are few; bound the cache anyway
                self._names[name] = encoded
        offset = fmt.HEADER_SIZE + (self._write_idx & self._mask) * fmt.RECORD_SIZE
        fmt.RECORD_STRUCT.pack_into(mm, offset, event, kind, flags, comm_rank, op_id, comm_id,
                                    seq, t_ns, dur, nbytes, flops, count, comm_size, encoded)
        # Publish last: on x86 (TSO) and under the GIL the slot is visible first.
        self._write_idx += 1
        words = self._words
        words[_WRITE_IDX] = self._write_idx
        words[_HEARTBEAT] = t_ns


# The header's counters, as indices of 8-byte words.
_WRITE_IDX, _READ_IDX = fmt.OFF_WRITE_IDX // 8, fmt.OFF_READ_IDX // 8
_DROPPED, _HEARTBEAT = fmt.OFF_DROPPED // 8, fmt.OFF_HEARTBEAT // 8


def _create_region(directory: str, path: str, header: fmt.Header) -> mmap.mmap:
    """Create the region under a temp name and rename it into place.

    Its blocks are reserved first: a sparse file on a nearly full tmpfs
    (/dev/shm) maps fine and then kills the training process with SIGBUS at
    the first record past the free space. Raises OSError (ENOSPC: its
    strerror says how big the ring is and what to do) when there is no room."""
    size = fmt.region_size(header.capacity)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".ring")
    try:
        _reserve(fd, size)
        mm = mmap.mmap(fd, size)
        mm[0:fmt.HEADER_STRUCT.size] = header.pack()
        os.rename(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        os.close(fd)
    return mm


def _reserve(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            # A file system without fallocate: writing zeros reserves the blocks too.
            left = size
            while left:
                left -= os.write(fd, _ZEROS[:min(len(_ZEROS), left)])
            return
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise OSError(exc.errno, f"no room for its {size >> 10} KiB ring "
                          f"({exc.strerror}); free space there (/dev/shm: docker --shm-size) "
                          f"or lower {envnames.RING_CAPACITY}") from None
        raise


_ZEROS = bytes(1 << 16)
