"""The Python writer on a tmpfs without room for its ring (issue 33 item 9):
the blocks are reserved up front, so it fails at creation with one message,
never with SIGBUS at a record past the free space."""

import os
import subprocess
import sys

import pytest

from diag.records import format as fmt
from tests import tmpfs

pytestmark = pytest.mark.timeout(60)

WRITE = """
import sys
from diag.records import format as fmt
from diag.records.writer import RecordWriter
try:
    w = RecordWriter(sys.argv[1], producer=1, rank=0, local_rank=0, world_size=1, capacity=4096)
except OSError as exc:
    print("REFUSED", exc.strerror)
    sys.exit(0)
for i in range(4096):
    w.count(fmt.KIND_KERNEL, "k", i)
print("WROTE")
"""


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 256 KiB tmpfs: room for a header, not for a default ring (516 KiB)."""
    with tmpfs.small_tmpfs(tmp_path / "small", "256k") as mnt:
        yield mnt


def test_no_room_for_the_ring_is_refused_at_creation_not_sigbus(small_tmpfs):
    # In a child: before the ring was reserved, its records past 256 KiB killed it.
    out = subprocess.run([sys.executable, "-c", WRITE, str(small_tmpfs)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, (out.returncode, out.stderr)
    assert out.stdout.startswith(f"REFUSED no room for its {fmt.region_size(4096) >> 10} KiB ring "
                                 f"(No space left on device); free space there"), out.stdout
    assert os.listdir(small_tmpfs) == []      # no temp file left behind
