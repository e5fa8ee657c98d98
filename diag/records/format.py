"""The one Python statement of the record layout in docs/records.md."""

from __future__ import annotations

import dataclasses
import struct

MAGIC = b"XPUDREC1"
VERSION = 1
HEADER_SIZE = 4096
RECORD_SIZE = 128
DEFAULT_CAPACITY = 4096
NAME_BYTES = 56

PRODUCER_PYTHON = 1
PRODUCER_HOOK = 2
PRODUCER_PREFIX = {PRODUCER_PYTHON: "py", PRODUCER_HOOK: "hook"}

EVENT_START = 1
EVENT_END = 2
EVENT_COUNT = 3

KIND_KERNEL = 1
KIND_GEMM = 2
KIND_COLLECTIVE = 3
KIND_P2P = 4
KIND_HOST_FUNC = 5

FLAG_DEVICE_TIMED = 1
FLAG_GRAPH_CAPTURED = 2
FLAG_FAILED = 4

HEADER_FLAG_DISABLED = 1

# Fixed, write-once part of the header (offsets 0..63).
HEADER_STRUCT = struct.Struct("<8sIIIIiiiiIIQQ")
OFF_WRITE_IDX = 64
OFF_READ_IDX = 128
OFF_DROPPED = 192
OFF_HEARTBEAT = 200
OFF_FLAGS = 44
U64 = struct.Struct("<Q")
U32 = struct.Struct("<I")

RECORD_STRUCT = struct.Struct("<BBHiQQQQQQQIi56s")
assert RECORD_STRUCT.size == RECORD_SIZE
assert HEADER_STRUCT.size == 64


class RecordFormatError(ValueError):
    """A region file that is not a progress region this reader understands."""


@dataclasses.dataclass(frozen=True)
class Header:
    capacity: int
    pid: int
    rank: int
    local_rank: int
    world_size: int
    producer: int
    flags: int
    start_unix_ns: int
    start_mono_ns: int

    def pack(self) -> bytes:
        return HEADER_STRUCT.pack(
            MAGIC, VERSION, HEADER_SIZE, RECORD_SIZE, self.capacity,
            self.pid, self.rank, self.local_rank, self.world_size,
            self.producer, self.flags, self.start_unix_ns, self.start_mono_ns,
        )

    @classmethod
    def unpack(cls, buf, source: str = "region") -> "Header":
        if len(buf) < HEADER_SIZE:
            raise RecordFormatError(f"{source}: too short for a header ({len(buf)} bytes)")
        (magic, version, header_size, record_size, capacity, pid, rank,
         local_rank, world_size, producer, flags, start_unix_ns,
         start_mono_ns) = HEADER_STRUCT.unpack_from(buf, 0)
        if magic != MAGIC:
            raise RecordFormatError(f"{source}: bad magic {magic!r}, not a progress region")
        if version != VERSION or header_size != HEADER_SIZE or record_size != RECORD_SIZE:
            raise RecordFormatError(
                f"{source}: format version {version} (header {header_size}, record "
                f"{record_size}) is not {VERSION}; upgrade xpu-diag on this node")
        if capacity == 0 or capacity & (capacity - 1):
            raise RecordFormatError(f"{source}: capacity {capacity} is not a power of two")
        return cls(capacity, pid, rank, local_rank, world_size, producer, flags,
                   start_unix_ns, start_mono_ns)


@dataclasses.dataclass(frozen=True)
class Record:
    event: int
    kind: int
    flags: int
    comm_rank: int
    op_id: int
    comm_id: int
    seq: int
    t_mono_ns: int
    duration_ns: int
    bytes: int
    flops: int
    count: int
    comm_size: int
    name: str

    def pack(self) -> bytes:
        return RECORD_STRUCT.pack(
            self.event, self.kind, self.flags, self.comm_rank, self.op_id,
            self.comm_id, self.seq, self.t_mono_ns, self.duration_ns,
            self.bytes, self.flops, self.count, self.comm_size,
            encode_name(self.name))

    @classmethod
    def unpack_from(cls, buf, offset: int) -> "Record":
        fields = list(RECORD_STRUCT.unpack_from(buf, offset))
        fields[-1] = fields[-1].split(b"\0", 1)[0].decode("utf-8", "replace")
        return cls(*fields)


def encode_name(name: str) -> bytes:
    """UTF-8, cut to NAME_BYTES-1 bytes without splitting a character."""
    raw = name.encode("utf-8")[: NAME_BYTES - 1]
    return raw.decode("utf-8", "ignore").encode("utf-8")


def region_size(capacity: int) -> int:
    return HEADER_SIZE + capacity * RECORD_SIZE


def region_filename(producer: int, rank: int, pid: int) -> str:
    return f"{PRODUCER_PREFIX.get(producer, 'p%d' % producer)}-r{rank}-p{pid}.ring"
