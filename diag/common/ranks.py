"""Fold rank sets into ranges (``0-3,9,11-15``) and back.

The viewer labels frames with these, and the collector's verdict lines use
them, so a set of 16,384 ranks stays one short readable string.
"""

from __future__ import annotations

from typing import Iterable


def fold(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 9, 11]`` -> ``"0-3,9,11"``; the empty set is ``""``.

    Duplicates are ignored and order does not matter.
    """
    ordered = sorted(set(ranks))
    parts = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def unfold(text: str) -> list[int]:
    """Inverse of :func:`fold`. Raises ValueError naming the bad part."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise ValueError(f"bad rank range {part!r} in {text!r}: expected N or N-M") from None
        if first < 0 or last < first:
            raise ValueError(f"bad rank range {part!r} in {text!r}: expected 0 <= N <= M")
        out.update(range(first, last + 1))
    return sorted(out)
