"""Contracts shared by the viewer's parsers, merge and output writers.

Rank sets are Python ints used as bitsets (bit r set = rank r), so a set of
16,384 ranks is one 2 KiB int and union/intersection/count are single C calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol, Sequence

PYTHON, NATIVE, THREAD, ROOT = "python", "native", "thread", "root"


class ViewerError(Exception):
    """A user-facing, one-line failure: the message names the input and the fix."""


class NoStacks(ViewerError):
    """The input holds no usable stack at all: the CLI writes error pictures."""


class Frame(NamedTuple):
    """One stack frame. A NamedTuple so stacks hash and compare at C speed.

    ``line`` is 0 when unknown (native frames); ``file`` is a short file name or
    a library's base name; ``kind`` is PYTHON or NATIVE (THREAD/ROOT for the
    synthetic first levels of the merged tree). ``lib`` is not in the label.
    """

    func: str
    file: str
    line: int
    kind: str
    lib: bool = False   # Python frame of the stdlib, torch or site-packages (not the user's code)

    @property
    def label(self) -> str:
        """``func@file:line``; ``func@lib`` when the line is unknown."""
        if self.kind in (THREAD, ROOT):
            return self.func
        if self.line:
            return f"{self.func}@{self.file}:{self.line}"
        return f"{self.func}@{self.file}" if self.file else self.func


@dataclass
class ThreadStack:
    """One thread of one process; ``frames`` are root first."""

    name: str
    tid: int
    frames: tuple[Frame, ...]
    is_main: bool = False


@dataclass
class ParseResult:
    """What a parser got out of one file. ``bad_lines`` counts skipped input."""

    threads: list[ThreadStack] = field(default_factory=list)
    bad_lines: int = 0
    pid: int | None = None


class Writer(Protocol):
    """Every output format: fed merged stacks one by one, then written once.

    ``add_stack`` gets one distinct thread stack and the bitset of the ranks
    that have exactly it. ``write`` writes ``path`` atomically (temp + rename).
    """

    def add_stack(self, thread: str, frames: Sequence[Frame], ranks: int) -> None: ...

    def write(self, path: Path) -> None: ...
