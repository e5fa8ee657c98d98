"""Fold rank sets into ranges (``0-3,9,11-15``) and back.

The viewer labels frames with these, and the collector's verdict lines use
them, so a set of 16,384 ranks stays one short readable string.
"""

from __future__ import annotations

from typing import Iterable


# A run of equally spaced ranks (one rank per node, a tensor-parallel
# position across the job) folds by its stride from this many ranks on:
# ``0-1016/8`` for 128 ranks; fewer read better listed (``0,8,16``).
MIN_STRIDED = 4


def fold(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 9, 11]`` -> ``"0-3,9,11"``; ``[0, 8, 16, 24, 32]`` ->
    ``"0-32/8"``; the empty set is ``""``.

    Duplicates are ignored and order does not matter. Consecutive ranks fold
    first, then runs of one stride of at least ``MIN_STRIDED`` ranks.
    """
    ordered = sorted(set(ranks))
    parts = []
    i, n = 0, len(ordered)
    while i < n:
        first = ordered[i]
        j = i
        while j + 1 < n and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j > i:
            parts.append(f"{first}-{ordered[j]}")
            i = j + 1
            continue
        if i + 1 < n:
            step = ordered[i + 1] - first
            j = i + 1
            while j + 1 < n and ordered[j + 1] - ordered[j] == step:
                j += 1
            # A stride run must not swallow the start of a consecutive run.
            if j + 1 < n and ordered[j + 1] == ordered[j] + 1:
                j -= 1
            if j - i + 1 >= MIN_STRIDED:
                parts.append(f"{first}-{ordered[j]}/{step}")
                i = j + 1
                continue
        parts.append(str(first))
        i += 1
    return ",".join(parts)


def unfold(text: str) -> list[int]:
    """Inverse of :func:`fold`. Raises ValueError naming the bad part."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        span, slash, by = part.partition("/")
        lo, sep, hi = span.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
            step = int(by) if slash else 1
        except ValueError:
            raise ValueError(f"bad rank range {part!r} in {text!r}: expected N, N-M or N-M/S") from None
        if first < 0 or last < first or step < 1 or (slash and not sep):
            raise ValueError(f"bad rank range {part!r} in {text!r}: expected 0 <= N <= M and S >= 1")
        out.update(range(first, last + 1, step))
    return sorted(out)
