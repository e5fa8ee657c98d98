"""Reads the NCCL profiler plugin's link table (kernel_hook/nccl_profiler/link_table.h).

The plugin writes ``<XPU_TIMER_SHM_DIR>/link-r<rank>-p<pid>.tab``: a 4096-byte
header (with up to 32 communicator slots) and 1024 entries of 64 bytes. Every
field is one aligned store by one writer, so a field is never torn; an entry
read while its op changes can mix two moments, so it is read twice and a
changed entry once more (the counters are diagnostic, one report late at worst).
"""

from __future__ import annotations

import glob
import mmap
import os
import re
import struct
import time

from diag.link.api import LinkEntry, LinkTableError

MAGIC = b"XPULINK1"
VERSION = 1
HEADER_SIZE = 4096
ENTRY_SIZE = 64
COMM_OFFSET = 128
COMM_SIZE = 64
FLAG_DISABLED = 1
NAME_RE = re.compile(r"link-r(-?\d+)-p(\d+)\.tab$")

_HEADER = struct.Struct("<8sIIIIiiIIQQQ")      # 64 bytes
_COMM = struct.Struct("<QiiiI40s")             # 64 bytes
_ENTRY = struct.Struct("<IBBHiIQQIIIIQQ")      # 64 bytes
assert _HEADER.size == 64 and _COMM.size == COMM_SIZE and _ENTRY.size == ENTRY_SIZE


class LinkTable:
    """One process's table, mapped read-only."""

    def __init__(self, path: str):
        self.path = path
        try:
            with open(path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise LinkTableError(f"cannot map link table {path}: {exc}") from None
        if len(self._map) < HEADER_SIZE:
            self.close()
            raise LinkTableError(f"link table {path} is {len(self._map)} bytes: shorter than its header")
        (magic, version, header_size, entry_size, capacity, pid, rank, _flags, _ncomms, start_mono_ns,
         _n, _dropped) = _HEADER.unpack_from(self._map, 0)
        if magic != MAGIC or version != VERSION or header_size != HEADER_SIZE or entry_size != ENTRY_SIZE:
            self.close()
            raise LinkTableError(f"link table {path}: unknown magic/version {magic!r}/{version}; "
                                 "the plugin and the agent come from different builds")
        if len(self._map) < HEADER_SIZE + capacity * ENTRY_SIZE:
            self.close()
            raise LinkTableError(f"link table {path} is truncated ({len(self._map)} bytes for {capacity} entries)")
        self.capacity, self.pid, self.rank, self.start_mono_ns = capacity, pid, rank, start_mono_ns

    @property
    def disabled(self) -> bool:
        return bool(_HEADER.unpack_from(self._map, 0)[7] & FLAG_DISABLED)

    @property
    def dropped(self) -> int:
        return _HEADER.unpack_from(self._map, 0)[11]

    def comms(self, destroyed: bool = False) -> dict[int, tuple[int, int, int, int]]:
        """Live communicator slots (and destroyed ones if asked): slot -> (comm_hash, comm rank, comm size, nodes)."""
        ncomms = min(_HEADER.unpack_from(self._map, 0)[8], (HEADER_SIZE - COMM_OFFSET) // COMM_SIZE)
        out = {}
        for slot in range(ncomms):
            comm_hash, rank, nranks, nnodes, valid, _name = _COMM.unpack_from(self._map, COMM_OFFSET + slot * COMM_SIZE)
            if valid == 1 or (destroyed and valid == 2):   # 2: destroyed
                out[slot] = (comm_hash, rank, nranks, nnodes)
        return out

    def read(self, now_ns: int | None = None, destroyed: bool = False) -> list[LinkEntry]:
        """Every valid entry of a live communicator (``destroyed``: of any);
        ``idle_ns`` against ``now_ns`` (CLOCK_MONOTONIC, the plugin's clock)."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        comms = self.comms(destroyed)
        n = min(_HEADER.unpack_from(self._map, 0)[10], self.capacity)
        first = self._map[HEADER_SIZE:HEADER_SIZE + n * ENTRY_SIZE]
        second = self._map[HEADER_SIZE:HEADER_SIZE + n * ENTRY_SIZE]
        out = []
        for i in range(n):
            raw = second[i * ENTRY_SIZE:(i + 1) * ENTRY_SIZE]
            if raw != first[i * ENTRY_SIZE:(i + 1) * ENTRY_SIZE]:
                raw = self._map[HEADER_SIZE + i * ENTRY_SIZE:HEADER_SIZE + (i + 1) * ENTRY_SIZE]
            (valid, kind, channel, slot, peer, last_state, ops, ops_done, nsteps, posted, moved, done,
             steps_total, t_ns) = _ENTRY.unpack(raw)
            if valid != 1 or slot not in comms:
                continue
            comm_hash, comm_rank, comm_size, _nodes = comms[slot]
            out.append(LinkEntry(comm_hash, comm_rank, comm_size, channel, kind, peer, ops, ops_done, nsteps,
                                 posted, moved, done, steps_total, last_state, max(0, now_ns - t_ns)))
        return out

    def close(self) -> None:
        try:
            self._map.close()
        except (AttributeError, ValueError):
            pass


def find(directory: str) -> dict[str, tuple[int, int]]:
    """Link tables in ``directory``: path -> (rank, pid) from the file name."""
    out = {}
    for path in glob.glob(os.path.join(directory, "link-r*-p*.tab")):
        m = NAME_RE.search(os.path.basename(path))
        if m:
            out[path] = (int(m.group(1)), int(m.group(2)))
    return out
