"""The snapshot checksum: one 64-bit word sum per tensor, combined by position.

Why not crc32: zlib's runs at about 2 GB/s on one core, so the 1.5 GB of
GPT-2 small with Adam would take 0.75 s per snapshot, longer than a step. A
word sum is what a GPU computes in well under a millisecond, so a snapshot's
sums are taken on the device from the very tensors copied, and a reader
re-computes them from the bytes it has (numpy, about 10 GB/s). It catches
bytes that are not the ones written (a torn or stale slot, a truncated
file), not tampering; the per-tensor weights make swapped tensors count.

Definition (``CHECKSUM_ALGO``): each tensor's bytes, zero-padded to a multiple
of 8, read as little-endian uint64 and summed modulo 2**64 (s_k); the pickled
objects the same (s_K); checksum = sum over k of (2k+1) * s_k modulo 2**64,
as 16 hex digits. Integer sums do not depend on the order of addition, so
every reader gets the same value.
"""

from __future__ import annotations

import numpy as np

CHUNK = 64 << 20
MASK = (1 << 64) - 1


def word_sum(buf) -> int:
    """sum64 of ``buf`` zero-padded to a multiple of 8 bytes."""
    view = memoryview(buf).cast("B")
    whole = len(view) - len(view) % 8
    total = 0
    for start in range(0, whole, CHUNK):
        words = np.frombuffer(view[start:min(start + CHUNK, whole)], dtype=np.uint64)
        total += int(np.add.reduce(words, dtype=np.uint64))
    return (total + tail_sum(view[whole:])) & MASK


PIECE = 8 << 20          # span_sums hands pieces of this size to its threads


def span_sums(buf, spans, pool=None) -> list[int]:
    """``word_sum`` of each ``(offset, nbytes)`` span of ``buf``. Spans are
    cut into 8-byte-aligned pieces of PIECE; with a thread pool the pieces of
    a MiB or more are summed on its threads (numpy adds without the GIL), so
    a snapshot's host sums take a fraction of a step on a many-core host."""
    view = memoryview(buf).cast("B")
    pieces = []                     # (span index, start, end)
    for i, (off, n) in enumerate(spans):
        whole = n - n % 8
        pieces += [(i, off + a, off + min(a + PIECE, whole)) for a in range(0, whole, PIECE)]

    def add(piece) -> int:
        _, a, b = piece
        return int(np.add.reduce(np.frombuffer(view[a:b], dtype=np.uint64), dtype=np.uint64))
    big = [p for p in pieces if p[2] - p[1] >= 1 << 20] if pool is not None else []
    values = dict(zip((id(p) for p in big), pool.map(add, big))) if len(big) > 1 else {}
    sums = [0] * len(spans)
    for p in pieces:
        sums[p[0]] += values[id(p)] if id(p) in values else add(p)
    return [(sums[i] + tail_sum(view[off + n - n % 8:off + n])) & MASK for i, (off, n) in enumerate(spans)]


def tail_sum(tail) -> int:
    """The last (fewer than 8) bytes as one zero-padded little-endian word."""
    return int.from_bytes(bytes(tail), "little") if len(tail) else 0


def combine(sums) -> str:
    value = 0
    for k, s in enumerate(sums):
        value = (value + (2 * k + 1) * (s & MASK)) & MASK
    return f"{value:016x}"


def of_slot(data, entries, objects: bytes) -> str:
    """The checksum of a slot's bytes as ``entries`` lay them out."""
    view = memoryview(data).cast("B")
    sums = [word_sum(view[e.offset:e.offset + e.nbytes]) for e in entries]
    return combine(sums + [word_sum(objects)])
