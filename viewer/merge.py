"""Merge stack groups root-first into one tree whose nodes carry rank bitsets.

Level 0 is the root ("all"), level 1 the thread names, then frames. Within a
thread a rank sits in exactly one node per level (its stack is one path), so
a frame's width is its rank count. The root's width is the sum of its threads'.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

from diag.common.ranks import fold
from viewer.api import ROOT, THREAD, Frame


def bits_of(ranks: Iterable[int]) -> int:
    """A bitset int from rank numbers, built in one bytearray (no 2 KiB temporaries)."""
    ranks = list(ranks)
    if not ranks:
        return 0
    buf = bytearray(max(ranks) // 8 + 1)
    for r in ranks:
        buf[r >> 3] |= 1 << (r & 7)
    return int.from_bytes(buf, "little")


def ranks_of(bits: int) -> list[int]:
    """The rank numbers in a bitset, ascending."""
    s = bin(bits)[:1:-1]  # bit 0 first
    out, i = [], s.find("1")
    while i >= 0:
        out.append(i)
        i = s.find("1", i + 1)
    return out


def gaps(present: Sequence[int], world: int) -> Iterator[tuple[int, int]]:
    """The ranges ``(first, last)`` of ``[0, world)`` that ``present`` (sorted,
    distinct) leaves out. Costs O(len(present)), never O(world): a world size
    read from a file name may be 999999999."""
    nxt = 0
    for r in present:
        if r >= world:
            break
        if r > nxt:
            yield nxt, r - 1
        nxt = r + 1
    if nxt < world:
        yield nxt, world - 1


def fold_gaps(present: Sequence[int], world: int) -> str:
    """:func:`fold` of the ranks of ``[0, world)`` not in ``present`` (sorted, distinct)."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in gaps(present, world))


class RankLabels:
    """Folded rank text per distinct bitset, cached: chains of frames share one set.

    ``table``: the rank number of each bit, ascending (bit i is rank
    ``table[i]``), so bitsets are as long as the ranks held, not as the
    largest rank number; None: bit r is rank r.
    """

    def __init__(self, world: int, limit: int | None = 160, table: Sequence[int] | None = None):
        self.world = world
        self.limit = limit
        self.table = table
        self._cache: dict[int, str] = {}
        self._leak: dict[int, str] = {}

    def ranks(self, bits: int) -> list[int]:
        """The rank numbers in a bitset, ascending."""
        found = ranks_of(bits)
        return found if self.table is None else [self.table[i] for i in found]

    def _cut(self, text: str, bits_count: int) -> str:
        if self.limit and len(text) > self.limit:
            cut = text.rfind(",", 0, self.limit)
            shown = text[:cut] if cut > 0 else text[: self.limit]
            text = f"{shown},…({bits_count} ranks)"
        return text

    def fold(self, bits: int) -> str:
        text = self._cache.get(bits)
        if text is None:
            text = self._cache[bits] = self._cut(fold(self.ranks(bits)), bits.bit_count())
        return text

    def leak(self, bits: int) -> str:
        """The ranks of the world not in ``bits``, folded (and cut like :meth:`fold`)."""
        text = self._leak.get(bits)
        if text is None:
            present = self.ranks(bits)
            missing = self.world - sum(1 for r in present if r < self.world)
            text = self._leak[bits] = self._cut(fold_gaps(present, self.world), missing)
        return text

    def label(self, frame: Frame, bits: int) -> str:
        """``func@file:line@<stuck>|<leak>``; threads and root get ranks only."""
        return f"{frame.label}@{self.fold(bits)}|{self.leak(bits)}"


class Node:
    __slots__ = ("frame", "ranks", "children", "width")

    def __init__(self, frame: Frame):
        self.frame = frame
        self.ranks = 0
        self.children: dict[Frame, Node] = {}
        self.width = 0

    def child(self, frame: Frame) -> "Node":
        node = self.children.get(frame)
        if node is None:
            node = self.children[frame] = Node(frame)
        return node

    def sorted_children(self) -> list["Node"]:
        """Biggest first, then by label: the majority sits left, stable output."""
        return sorted(self.children.values(), key=lambda n: (-n.width, n.frame.label))


class Tree:
    """Built by ``add`` calls, then ``finish`` computes widths (rank counts)."""

    def __init__(self):
        self.root = Node(Frame("all", "", 0, ROOT))

    def add(self, thread: str, frames: Sequence[Frame], ranks: int) -> None:
        node = self.root.child(Frame(thread, "", 0, THREAD))
        node.ranks |= ranks
        for f in frames:
            node = node.child(f)
            node.ranks |= ranks

    def finish(self) -> "Tree":
        for t in self.root.children.values():
            for n, _ in walk(t):
                n.width = n.ranks.bit_count()
        self.root.width = sum(t.width for t in self.root.children.values())
        self.root.ranks = 0
        for t in self.root.children.values():
            self.root.ranks |= t.ranks
        return self

    def leaves(self) -> Iterator[tuple[list[Node], int]]:
        """(path below the root, bitset of ranks whose stack ends there), in
        pre-order, children biggest first. Iterative: a stack may be
        thousands of frames deep (a runaway recursion), far past Python's
        recursion limit."""
        for t in self.root.sorted_children():
            path: list[Node] = []
            todo: list[Node | None] = [t]   # None: leave the node on top of ``path``
            while todo:
                node = todo.pop()
                if node is None:
                    done = path.pop()
                    below = 0
                    for c in done.children.values():
                        below |= c.ranks
                    if done.ranks & ~below:
                        yield list(path) + [done], done.ranks & ~below
                    continue
                path.append(node)
                todo.append(None)
                todo.extend(reversed(node.sorted_children()))


def walk(node: Node, depth: int = 0) -> Iterator[tuple[Node, int]]:
    """Pre-order (node, depth), children biggest first; iterative (60-deep stacks)."""
    stack = [(node, depth)]
    while stack:
        n, d = stack.pop()
        yield n, d
        stack.extend((c, d + 1) for c in reversed(n.sorted_children()))
