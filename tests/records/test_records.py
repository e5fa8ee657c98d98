"""The Python writer against the one reader (docs/records.md)."""

import os
import struct
import threading

import pytest

from diag.records import format as fmt
from diag.records.reader import RegionReader, scan
from diag.records.writer import RecordWriter


@pytest.fixture
def shm_dir(tmp_path):
    return str(tmp_path)


def make_writer(shm_dir, capacity=8):
    return RecordWriter(shm_dir, producer=fmt.PRODUCER_PYTHON, rank=3, local_rank=1,
                        world_size=4, capacity=capacity)


def test_header_round_trip(shm_dir):
    writer = make_writer(shm_dir)
    reader = RegionReader(writer.path)
    assert os.path.basename(writer.path) == f"py-r3-p{os.getpid()}.ring"
    h = reader.header
    assert (h.rank, h.local_rank, h.world_size, h.pid, h.producer, h.capacity) == (
        3, 1, 4, os.getpid(), fmt.PRODUCER_PYTHON, 8)
    assert h.start_unix_ns > 0 and h.start_mono_ns > 0


def test_start_end_round_trip(shm_dir):
    writer = make_writer(shm_dir)
    reader = RegionReader(writer.path)
    op = writer.start(fmt.KIND_COLLECTIVE, "all_reduce", comm_id=7, seq=41, nbytes=4096,
                      comm_rank=3, comm_size=4)
    writer.end(op, fmt.KIND_COLLECTIVE, "all_reduce", duration_ns=1234, comm_id=7, seq=41)
    start, end = reader.poll()
    assert (start.event, start.kind, start.name, start.comm_id, start.seq, start.bytes,
            start.comm_rank, start.comm_size) == (
        fmt.EVENT_START, fmt.KIND_COLLECTIVE, "all_reduce", 7, 41, 4096, 3, 4)
    assert (end.event, end.op_id, end.duration_ns) == (fmt.EVENT_END, op, 1234)
    assert end.t_mono_ns >= start.t_mono_ns
    assert reader.poll() == []


def test_full_ring_drops_and_counts_never_blocks(shm_dir):
    writer = make_writer(shm_dir, capacity=4)
    reader = RegionReader(writer.path)
    for i in range(10):
        writer.count(fmt.KIND_KERNEL, f"k{i}", i + 1)
    # Counts stop a quarter short of a full ring (left to collectives, tests/records/test_full_ring.py).
    assert reader.dropped == 7 and writer.dropped == 7
    assert [r.name for r in reader.poll()] == ["k0", "k1", "k2"]
    writer.count(fmt.KIND_KERNEL, "after", 1)
    assert [r.name for r in reader.poll()] == ["after"]


def test_wraps_around_many_times(shm_dir):
    writer = make_writer(shm_dir, capacity=4)
    reader = RegionReader(writer.path)
    seen = []
    for i in range(50):
        writer.count(fmt.KIND_KERNEL, "k", i)
        if i % 3 == 2:
            seen += [r.count for r in reader.poll()]
    seen += [r.count for r in reader.poll()]
    assert seen == list(range(50))


def test_threads_share_one_region_without_losing_records(shm_dir):
    # 16,000 records, host-function STARTs among them: under the 3/4 of the ring they may fill
    writer = make_writer(shm_dir, capacity=1 << 15)
    reader = RegionReader(writer.path)

    def work():
        for _ in range(1000):
            op = writer.start(fmt.KIND_HOST_FUNC, "f")
            writer.end(op, fmt.KIND_HOST_FUNC, "f", duration_ns=1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = reader.poll()
    assert len(records) == 16000
    starts = {r.op_id for r in records if r.event == fmt.EVENT_START}
    ends = {r.op_id for r in records if r.event == fmt.EVENT_END}
    assert starts == ends and len(starts) == 8000


def test_long_name_is_cut_on_a_character_boundary(shm_dir):
    writer = make_writer(shm_dir)
    reader = RegionReader(writer.path)
    writer.count(fmt.KIND_KERNEL, "é" * 40, 1)
    (rec,) = reader.poll()
    assert rec.name == "é" * 27  # 54 bytes: the 28th would need 56


def test_reader_refuses_unknown_version(shm_dir):
    writer = make_writer(shm_dir)
    with open(writer.path, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<I", 99))
    with pytest.raises(fmt.RecordFormatError, match="format version 99"):
        RegionReader(writer.path)


def test_scan_skips_temp_files_and_reports_bad_regions(shm_dir):
    good = make_writer(shm_dir)
    with open(os.path.join(shm_dir, ".tmp-half.ring"), "wb") as f:
        f.write(b"x")
    bad = os.path.join(shm_dir, "py-r9-p1.ring")
    with open(bad, "wb") as f:
        f.write(b"\0" * fmt.HEADER_SIZE)
    result = scan(shm_dir, {})
    assert list(result.readers) == [good.path]
    assert "bad magic" in result.errors[bad]
    again = scan(shm_dir, result.readers)
    assert again.readers[good.path] is result.readers[good.path]


def test_scan_never_maps_a_region_through_a_link(shm_dir, tmp_path_factory):
    """The agent writes read_idx back into what it maps: a link planted in the
    region directory must not let it write into another file."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    victim = make_writer(str(elsewhere))
    before = open(victim.path, "rb").read()
    link = os.path.join(shm_dir, "py-r0-p1.ring")
    os.symlink(victim.path, link)
    os.mkdir(os.path.join(shm_dir, "py-r0-p2.ring"))  # nor into a directory
    result = scan(shm_dir, {})
    assert result.readers == {}
    assert set(result.errors) == {link, os.path.join(shm_dir, "py-r0-p2.ring")}
    assert open(victim.path, "rb").read() == before
