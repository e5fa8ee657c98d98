"""The one Python statement of the record layout in docs/records.md."""

from __future__ import annotations

import dataclasses
import struct
import time

MAGIC = b"XPUDREC1"
VERSION = 1
HEADER_SIZE = 4096
RECORD_SIZE = 128
DEFAULT_CAPACITY = 4096
NAME_BYTES = 56
# Bounds a reader holds every header to (docs/records.md): a region is written
# by a worker, and a crashing or buggy one can leave any bytes in it.
MAX_CAPACITY = 1 << 20        # XPU_TIMER_RING_CAPACITY's own limit (128 MiB of /dev/shm)
MAX_WORLD_SIZE = 1 << 24
# A region's start time is on this host's CLOCK_MONOTONIC: never in the future.
START_SLACK_NS = 60_000_000_000

PRODUCER_PYTHON = 1
PRODUCER_HOOK = 2
PRODUCER_PREFIX = {PRODUCER_PYTHON: "py", PRODUCER_HOOK: "hook"}

EVENT_START = 1
EVENT_END = 2
EVENT_COUNT = 3
# Written once per process group by the tracer: comm_id is the group id, name
# the group's display name, comm_size its size (docs/records.md).
EVENT_GROUP = 4
# Written by the tracer once per CUDA device the rank uses (docs/records.md):
# comm_rank the CUDA ordinal, comm_id/seq the UUID's 16 bytes, bytes the PCI
# address, name the CUDA_VISIBLE_DEVICES entry of the ordinal.
EVENT_DEVICE = 5
DEVICE_HAS_UUID = 1           # flags of a DEVICE record
DEVICE_HAS_PCI = 2
# Written by the hook's drainer (docs/records.md, "Kernel probes"): the
# process's oldest unfinished kernel completion probe; op_id 0: none is overdue.
EVENT_PROBE = 6

KIND_KERNEL = 1
KIND_GEMM = 2
KIND_COLLECTIVE = 3
KIND_P2P = 4
KIND_HOST_FUNC = 5

FLAG_DEVICE_TIMED = 1
FLAG_GRAPH_CAPTURED = 2
FLAG_FAILED = 4
FLAG_DTYPE_SHIFT = 8          # bits 8-15 of a collective/p2p record: NCCL data type + 1

# Collectives and p2p count in separate lanes of one communicator (as Flight
# Recorder's collective_seq_id and p2p_seq_id): a record's lane is its kind.
COMM_LANES = (KIND_COLLECTIVE, KIND_P2P)

# NCCL's numbering (nccl.h ncclDataType_t, ncclRedOp_t), used by both producers.
DTYPE_NAMES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32",
               "float64", "bfloat16", "float8_e4m3", "float8_e5m2")
REDOP_NAMES = ("sum", "prod", "max", "min", "avg")


# The hook names ops after the NCCL calls, the tracer after torch.distributed.
NCCL_TO_TORCH = {"ncclAllReduce": "all_reduce", "ncclAllGather": "all_gather",
                 "ncclReduceScatter": "reduce_scatter", "ncclBroadcast": "broadcast",
                 "ncclReduce": "reduce", "ncclSend": "send", "ncclRecv": "recv"}


def torch_name(name: str) -> str:
    """The torch.distributed name of an op, whichever producer named it."""
    return NCCL_TO_TORCH.get(name, name)


def pack_coll_args(reduce_op: int = -1, peer: int = -1) -> int:
    """The ``flops`` field of a collective/p2p record: bits 0-7 reduce op + 1,
    bits 32-63 root or peer + 1 (0 = none). Collectives carry no FLOPs."""
    return ((reduce_op + 1) & 0xFF) | (((peer + 1) & 0xFFFFFFFF) << 32)


def unpack_coll_args(flops: int) -> tuple[int, int]:
    """(reduce_op, peer) from :func:`pack_coll_args`, -1 for none."""
    return (flops & 0xFF) - 1, ((flops >> 32) & 0xFFFFFFFF) - 1


def pack_pci(domain: int, bus: int, device: int, function: int = 0) -> int:
    """The ``bytes`` field of a DEVICE record: domain, bus, device, function."""
    return ((domain & 0xFFFFFFFF) << 32) | ((bus & 0xFF) << 16) | ((device & 0xFF) << 8) | (function & 0xFF)


def pci_text(packed: int) -> str:
    """``0000:1b:00.0`` (lspci form) from :func:`pack_pci`."""
    return (f"{packed >> 32:04x}:{(packed >> 16) & 0xFF:02x}:{(packed >> 8) & 0xFF:02x}."
            f"{packed & 0xFF:x}")


def pack_uuid(uuid: str) -> tuple[int, int]:
    """``GPU-8c1f1234-...`` (or bare hex) -> (comm_id, seq) of a DEVICE record; (0, 0) if unparsable."""
    hexits = uuid.split("-", 1)[1] if uuid[:4].upper() in ("GPU-", "MIG-") else uuid
    hexits = hexits.replace("-", "")
    try:
        raw = bytes.fromhex(hexits)
    except ValueError:
        return 0, 0
    if len(raw) != 16:
        return 0, 0
    return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")


def uuid_text(hi: int, lo: int) -> str:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (NVML's form) from :func:`pack_uuid`."""
    h = (hi.to_bytes(8, "big") + lo.to_bytes(8, "big")).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def dtype_of(flags: int) -> int:
    """NCCL data type of a collective/p2p record, -1 when unknown."""
    return ((flags >> FLAG_DTYPE_SHIFT) & 0xFF) - 1

HEADER_FLAG_DISABLED = 1

# Events and the kinds each may carry; a record outside these is garbage and
# skipped (docs/records.md). DEVICE records carry kind 0.
OP_KINDS = frozenset((KIND_KERNEL, KIND_GEMM, KIND_COLLECTIVE, KIND_P2P, KIND_HOST_FUNC))
EVENT_KINDS = {EVENT_START: OP_KINDS, EVENT_END: OP_KINDS, EVENT_COUNT: OP_KINDS,
               EVENT_GROUP: frozenset((KIND_COLLECTIVE,)), EVENT_DEVICE: frozenset((0,)),
               EVENT_PROBE: frozenset((KIND_KERNEL,))}

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
        header = cls(capacity, pid, rank, local_rank, world_size, producer, flags,
                     start_unix_ns, start_mono_ns)
        why = header.problem()
        if why:
            raise RecordFormatError(f"{source}: {why}")
        return header

    def problem(self, now_mono_ns: int | None = None) -> str:
        """Why this header cannot be a producer's, or "": every field bounded."""
        if not 0 < self.capacity <= MAX_CAPACITY or self.capacity & (self.capacity - 1):
            return f"capacity {self.capacity} is not a power of two up to {MAX_CAPACITY}"
        if not 0 < self.world_size <= MAX_WORLD_SIZE:
            return f"world size {self.world_size} is not within 1..{MAX_WORLD_SIZE}"
        if not 0 <= self.rank < self.world_size:
            return f"rank {self.rank} is not within 0..{self.world_size - 1}"
        # -1: the tracer ran without LOCAL_RANK
        if not -1 <= self.local_rank < self.world_size:
            return f"local rank {self.local_rank} is not within -1..{self.world_size - 1}"
        if self.pid <= 0:
            return f"pid {self.pid} is not a process id"
        if self.producer not in PRODUCER_PREFIX:
            return f"producer {self.producer} is neither 1 (python) nor 2 (hook)"
        now = time.monotonic_ns() if now_mono_ns is None else now_mono_ns
        if self.start_mono_ns > now + START_SLACK_NS:
            return f"start time {self.start_mono_ns} ns is ahead of this host's clock ({now} ns)"
        return ""


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
