"""The C++ writer (kernel_hook/records.h) against the one Python reader."""

import os
import subprocess

import pytest

from diag.records import format as fmt
from diag.records.reader import RegionReader, scan
from tests.kernel_hook.conftest import BUILD

NAME_TAIL = "é" * 28


def _write(tmp_path, capacity, n, *extra):
    out = subprocess.run([os.path.join(BUILD, "records_writer"), str(tmp_path), str(capacity),
                          str(n), *extra], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    path, written, dropped = out.stdout.split()
    return path, int(written), int(dropped)


def _expected(i):
    name = f"op-{i}-{NAME_TAIL}".encode()[:55].decode("utf-8", "ignore")
    return fmt.Record(1 + i % 3, 1 + i % 5, i % 8 | (10 << 8), i % 7 - 1, 1000 + i,
                      0xF00DF00DF00DF00D + i, i + 1, 10**9 * i + 7, 1 << (i % 60), i * 4096,
                      i * 1000000007, i + 1, 8, name)


def test_reader_reads_every_field_the_writer_wrote(built, tmp_path):
    path, written, dropped = _write(tmp_path, 64, 40)
    assert (written, dropped) == (40, 0)
    assert os.path.basename(path) == "hook-r3-p4242.ring"
    reader = RegionReader(path)
    h = reader.header
    assert (h.capacity, h.pid, h.rank, h.local_rank, h.world_size, h.producer) == \
        (64, 4242, 3, 1, 8, fmt.PRODUCER_HOOK)
    assert h.start_unix_ns > 0 and h.start_mono_ns > 0 and not reader.disabled
    assert reader.poll() == [_expected(i) for i in range(40)]
    assert reader.heartbeat_mono_ns == _expected(39).t_mono_ns


def test_full_ring_drops_and_counts(built, tmp_path):
    path, written, dropped = _write(tmp_path, 16, 20)
    assert (written, dropped) == (16, 4)
    reader = RegionReader(path)
    assert reader.dropped == 4
    # Record i has kind 1 + i % 5: past 12 of the 16 slots only collectives
    # (3) and p2p ops (4) go in, a quarter of the ring kept for them.
    assert reader.poll() == [_expected(i) for i in (*range(14), 17, 18)]


def test_disabled_flag_and_no_temp_file_left(built, tmp_path):
    path, _, _ = _write(tmp_path, 8, 1, "0", "disable")
    assert RegionReader(path).disabled
    assert os.listdir(tmp_path) == ["hook-r0-p4242.ring"]
    assert list(scan(str(tmp_path), {}).readers) == [path]


@pytest.mark.parametrize("capacity", ["12", "0"])
def test_bad_capacity_is_one_line(built, tmp_path, capacity):
    out = subprocess.run([os.path.join(BUILD, "records_writer"), str(tmp_path), capacity, "1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert out.stderr.strip() == f"ring capacity {capacity} is not a power of two"


def _unmatched_starts(records) -> set[int]:
    starts = {r.op_id for r in records if r.event == fmt.EVENT_START}
    return starts - {r.op_id for r in records if r.event == fmt.EVENT_END}


def test_an_end_is_never_dropped_once_its_start_went_in(built, tmp_path):
    """The drainer's order (tests/records/test_full_ring.py is the Python
    writer's twin): 20 collectives started with no reader, then ended."""
    path, written, dropped = _write(tmp_path, 16, 20, "0", "nested")
    assert (written, dropped) == (16, 24)
    records = RegionReader(path).poll()
    assert [r.event for r in records].count(fmt.EVENT_END) == 8 and not _unmatched_starts(records)


def test_a_gemm_flood_leaves_room_for_the_collective(built, tmp_path):
    path, written, dropped = _write(tmp_path, 16, 100, "0", "flood")
    records = RegionReader(path).poll()
    assert [(r.event, r.seq) for r in records if r.kind == fmt.KIND_COLLECTIVE] == \
        [(fmt.EVENT_START, 1), (fmt.EVENT_END, 1)]
    assert (written, dropped) == (14, 2 * 94) and not _unmatched_starts(records)
