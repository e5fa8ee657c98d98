"""The reader against regions a crashing or buggy worker wrote over (issue 33
item 5): every header field bounded, indices bounded on every poll, garbage
records skipped and counted, work per poll bounded, and a shrunk file an
error, never SIGBUS."""

import os
import struct
import subprocess
import sys

import pytest

from diag.records import format as fmt
from diag.records import reader as rd
from diag.records.reader import RegionReader
from diag.records.writer import RecordWriter

pytestmark = pytest.mark.timeout(60)
GARBAGE_RANK, GARBAGE_WORLD, GARBAGE_WRITE_IDX = 2**31 - 1, -7, 2**63 - 5


def make_writer(shm_dir, capacity=64):
    return RecordWriter(str(shm_dir), producer=fmt.PRODUCER_PYTHON, rank=1, local_rank=1,
                        world_size=4, capacity=capacity)


def scribble(path, rank=GARBAGE_RANK, world=GARBAGE_WORLD, write_idx=GARBAGE_WRITE_IDX):
    """The issue's region: its size still consistent, the fields garbage."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(fmt.HEADER_SIZE)
        f.write(b"\xff" * (size - fmt.HEADER_SIZE))
        f.seek(28)
        f.write(struct.pack("<iii", rank, 0, world))
        f.seek(fmt.OFF_WRITE_IDX)
        f.write(struct.pack("<Q", write_idx))


@pytest.mark.parametrize("field, value, says", [
    ("rank", GARBAGE_RANK, f"rank {GARBAGE_RANK} is not within 0..3"),
    ("world", GARBAGE_WORLD, "world size -7 is not within"),
    ("local", 4, "local rank 4 is not within -1..3"),
    ("capacity", 1 << 21, "capacity 2097152 is not a power of two up to 1048576"),
    ("pid", 0, "pid 0 is not a process id"),
    ("producer", 7, "producer 7 is neither"),
])
def test_each_header_field_is_bounded(tmp_path, field, value, says):
    writer = make_writer(tmp_path)
    offset = {"capacity": 20, "pid": 24, "rank": 28, "local": 32, "world": 36, "producer": 40}[field]
    with open(writer.path, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<i" if value < 0 else "<I", value))
    with pytest.raises(fmt.RecordFormatError) as err:
        RegionReader(writer.path)
    assert str(err.value).startswith(writer.path + ": ") and says in str(err.value)
    assert "\n" not in str(err.value)


def test_the_issues_garbage_region_is_refused_at_open(tmp_path):
    writer = make_writer(tmp_path, capacity=4096)
    scribble(writer.path)
    with pytest.raises(fmt.RecordFormatError, match=f"rank {GARBAGE_RANK} is not within|world size -7"):
        RegionReader(writer.path)


def test_a_file_size_other_than_the_capacity_makes_is_refused(tmp_path):
    writer = make_writer(tmp_path, capacity=64)
    with open(writer.path, "ab") as f:
        f.write(b"\0" * fmt.RECORD_SIZE)
    with pytest.raises(fmt.RecordFormatError, match="but capacity 64 makes"):
        RegionReader(writer.path)


def test_a_write_index_scribbled_after_open_is_bounded_and_the_stream_resumes(tmp_path):
    writer = make_writer(tmp_path, capacity=64)
    reader = RegionReader(writer.path)
    op = writer.start(fmt.KIND_COLLECTIVE, "all_reduce", seq=5)
    assert [r.seq for r in reader.poll()] == [5]
    scribble(writer.path)            # rank/world changed too: read once at open, not again
    assert reader.poll() == []       # capacity records of 0xff, each skipped
    assert (reader.bad_records, reader.lost) == (64, GARBAGE_WRITE_IDX - 64 - 1)
    assert "more than the ring's 64" in reader.index_problem
    # The garbage index is never told to the writer as the reader's.
    assert struct.unpack_from("<Q", open(writer.path, "rb").read(), fmt.OFF_READ_IDX)[0] == 1
    assert reader.poll() == [] and reader.index_problem == ""
    # The writer republishes its own count with its next record: read on from it.
    writer.end(op, fmt.KIND_COLLECTIVE, "all_reduce", duration_ns=7, seq=5)
    [end] = reader.poll()
    assert (end.event, end.seq, end.duration_ns) == (fmt.EVENT_END, 5, 7)
    assert "went back" in reader.index_problem
    writer.count(fmt.KIND_KERNEL, "k", 3)
    assert [r.count for r in reader.poll()] == [3] and reader.index_problem == ""


def test_records_with_an_unknown_event_or_kind_are_skipped_and_counted(tmp_path):
    writer = make_writer(tmp_path)
    reader = RegionReader(writer.path)
    writer.count(fmt.KIND_KERNEL, "good", 1)
    writer.count(fmt.KIND_KERNEL, "bad event", 1)
    writer.count(fmt.KIND_KERNEL, "bad kind", 1)
    with open(writer.path, "r+b") as f:
        f.seek(fmt.HEADER_SIZE + fmt.RECORD_SIZE)
        f.write(b"\x09")                       # event 9
        f.seek(fmt.HEADER_SIZE + 2 * fmt.RECORD_SIZE + 1)
        f.write(b"\xee")                       # kind 238
    assert [r.name for r in reader.poll()] == ["good"] and reader.bad_records == 2


def test_one_poll_reads_at_most_its_limit(tmp_path):
    writer = make_writer(tmp_path, capacity=1 << 15)
    reader = RegionReader(writer.path)
    for i in range(rd.POLL_LIMIT + 100):
        writer.count(fmt.KIND_KERNEL, "k", i)
    first = reader.poll()
    assert len(first) == rd.POLL_LIMIT and reader.pending == 100
    assert [r.count for r in reader.poll()] == list(range(rd.POLL_LIMIT, rd.POLL_LIMIT + 100))


def test_a_garbage_drop_count_is_bounded(tmp_path):
    writer = make_writer(tmp_path)
    with open(writer.path, "r+b") as f:
        f.seek(fmt.OFF_DROPPED)
        f.write(b"\xff" * 8)
    assert RegionReader(writer.path).dropped == 1 << 53


SHRINK = """
import os, sys
from diag.records import format as fmt
from diag.records.reader import RegionReader
from diag.records.writer import RecordWriter
w = RecordWriter(sys.argv[1], producer=1, rank=0, local_rank=0, world_size=1, capacity=64)
r = RegionReader(w.path)
w.count(fmt.KIND_KERNEL, "k", 1)
os.truncate(w.path, 0)   # a worker shrinks its region under the agent
try:
    r.poll()
except fmt.RecordFormatError as exc:
    print("ERROR", exc)
"""


def test_a_region_shrunk_under_the_reader_is_an_error_not_sigbus(tmp_path):
    # In a child: before the reader stopped mapping regions, this killed it.
    out = subprocess.run([sys.executable, "-c", SHRINK, str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, (out.returncode, out.stderr)
    assert out.stdout.startswith("ERROR ") and "shrunk" in out.stdout
