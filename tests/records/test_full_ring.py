"""What a full ring may drop (docs/records.md, "When the ring is full"), the
Python writer against the one reader (the C++ writer's twins are in
tests/kernel_hook/test_records_cpp.py): never the END of an op whose START
went in, never a collective for a host function's flood; and the write index
published so the reader never sees it go back (issue 41)."""

import os
import struct
import subprocess
import sys
import time

import pytest

from diag.records import format as fmt
from diag.records.reader import RegionReader
from diag.records.writer import RecordWriter

pytestmark = pytest.mark.timeout(60)


def make_writer(shm_dir, capacity):
    return RecordWriter(str(shm_dir), producer=fmt.PRODUCER_PYTHON, rank=0, local_rank=0,
                        world_size=2, capacity=capacity)


def unmatched_starts(records) -> set[int]:
    """op ids of STARTs the reader got without their END: ops it would keep in flight."""
    starts = {r.op_id for r in records if r.event == fmt.EVENT_START}
    return starts - {r.op_id for r in records if r.event == fmt.EVENT_END}


def test_an_end_is_never_dropped_once_its_start_went_in(tmp_path):
    writer = make_writer(tmp_path, 16)
    reader = RegionReader(writer.path)
    ops = [writer.start(fmt.KIND_COLLECTIVE, "all_reduce", 7, seq) for seq in range(1, 21)]
    # 8 STARTs, each holding a slot for its END: 16, the ring.
    assert sum(op > 0 for op in ops) == 8 and writer.open_ops == 8
    for seq, op in reversed(list(enumerate(ops, 1))):
        writer.end(op, fmt.KIND_COLLECTIVE, "all_reduce", 5, 7, seq)
    records = reader.poll()
    assert [r.event for r in records].count(fmt.EVENT_END) == 8
    assert not unmatched_starts(records) and writer.open_ops == 0
    assert (writer.dropped, reader.dropped) == (24, 24)


def test_a_host_function_flood_leaves_room_for_the_collective(tmp_path):
    writer = make_writer(tmp_path, 16)
    reader = RegionReader(writer.path)
    for _ in range(100):
        op = writer.start(fmt.KIND_HOST_FUNC, "tick")
        writer.end(op, fmt.KIND_HOST_FUNC, "tick", 1)
    op = writer.start(fmt.KIND_COLLECTIVE, "all_reduce", 0, 57)
    assert op > 0
    writer.end(op, fmt.KIND_COLLECTIVE, "all_reduce", 9, 0, 57)
    records = reader.poll()
    assert [(r.event, r.seq) for r in records if r.kind == fmt.KIND_COLLECTIVE] == \
        [(fmt.EVENT_START, 57), (fmt.EVENT_END, 57)]
    # Host functions took 12 of the 16 slots (a quarter short), whole ops only.
    assert len(records) == 14 and not unmatched_starts(records)
    assert writer.dropped == 2 * 94


def test_a_drained_ring_takes_starts_again(tmp_path):
    writer = make_writer(tmp_path, 8)
    reader = RegionReader(writer.path)
    held = writer.start(fmt.KIND_HOST_FUNC, "long")
    for _ in range(10):
        writer.end(writer.start(fmt.KIND_HOST_FUNC, "tick"), fmt.KIND_HOST_FUNC, "tick", 1)
    assert writer.dropped > 0
    reader.poll()
    op = writer.start(fmt.KIND_HOST_FUNC, "tick")
    assert op > 0
    writer.end(op, fmt.KIND_HOST_FUNC, "tick", 1)
    writer.end(held, fmt.KIND_HOST_FUNC, "long", 1)
    assert [(r.event, r.name) for r in reader.poll()] == [
        (fmt.EVENT_START, "tick"), (fmt.EVENT_END, "tick"), (fmt.EVENT_END, "long")]
    assert writer.open_ops == 0


def test_a_write_index_read_once_behind_moves_the_reader_nowhere(tmp_path):
    """A torn read (the index being stored while the agent read it) seen once:
    rewinding to it read reused slots again, a START twice (a phantom op)."""
    writer = make_writer(tmp_path, 8)
    reader = RegionReader(writer.path)
    for seq in range(1, 4):
        writer.end(writer.start(fmt.KIND_COLLECTIVE, "all_reduce", 0, seq),
                   fmt.KIND_COLLECTIVE, "all_reduce", 1, 0, seq)
    assert len(reader.poll()) == 6
    with open(writer.path, "r+b") as f:
        f.seek(fmt.OFF_WRITE_IDX)
        f.write(struct.pack("<Q", 0))
    assert reader.poll() == [] and reader.index_problem == ""
    writer.end(writer.start(fmt.KIND_COLLECTIVE, "all_reduce", 0, 4),
               fmt.KIND_COLLECTIVE, "all_reduce", 1, 0, 4)
    assert [(r.event, r.seq) for r in reader.poll()] == [(fmt.EVENT_START, 4), (fmt.EVENT_END, 4)]
    assert reader.lost == 0


FAST_WRITER = """
import sys, time
from diag.records import format as fmt
from diag.records.writer import RecordWriter
w = RecordWriter(sys.argv[1], producer=1, rank=0, local_rank=0, world_size=1, capacity=1 << 20)
print(w.path, flush=True)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    for _ in range(1000):
        w.count(fmt.KIND_KERNEL, "k", 1)
"""


def test_the_write_index_never_reads_as_going_back(tmp_path):
    """struct's pack_into zero-fills a field before writing it: the agent read
    the index as 0 about once in six reads of a busy writer."""
    proc = subprocess.Popen([sys.executable, "-c", FAST_WRITER, str(tmp_path), "1.5"],
                            stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        path = proc.stdout.readline().strip()
        fd = os.open(path, os.O_RDONLY)
        last, reads, back = 0, 0, 0
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            (idx,) = struct.unpack("<Q", os.pread(fd, 8, fmt.OFF_WRITE_IDX))
            back += idx < last
            last, reads = max(last, idx), reads + 1
        os.close(fd)
    finally:
        proc.wait(30)
    assert reads > 10_000 and last > 0 and back == 0, (reads, last, back)
