"""Folded stacks (``a;b;c N``) for flamegraph.pl, speedscope and inferno.

One line per distinct stack end: the frames from the thread name down, each
labelled ``func@file:line@<stuck>|<leak>``, then the number of ranks whose
stack ends exactly there. Lines come in tree order (biggest group first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from viewer.api import Frame
from viewer.atomic import write_text
from viewer.merge import RankLabels, Tree


class Folded:
    def __init__(self, world: int, table: Sequence[int] | None = None):
        self.world, self.table = world, table
        self.tree = Tree()

    def add_stack(self, thread: str, frames: Sequence[Frame], ranks: int) -> None:
        self.tree.add(thread, frames, ranks)

    def render(self) -> str:
        labels = RankLabels(self.world, table=self.table)
        lines = []
        for path, own in self.tree.finish().leaves():
            text = ";".join(labels.label(n.frame, n.ranks).replace(";", ",") for n in path)
            lines.append(f"{text} {own.bit_count()}")
        return "\n".join(lines) + ("\n" if lines else "")

    def write(self, path: Path) -> None:
        write_text(path, self.render())
