"""``stacks.dot``: the merged call tree, collapsed to where ranks diverge.

A chain of frames that all hold the same ranks becomes one box (first frame,
"… N frames …", last frame), so the picture shows only the forks; every box
carries its folded rank set, and boxes held by a minority are filled red.

``dot`` runs with a wall-time limit and only on source up to a size limit:
graphviz's layout is superlinear, and a 200 MB dump once kept it busy for
minutes. Past either limit stacks.svg is not drawn, the CLI says so in one
line, and every other picture is written as usual.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Sequence

from viewer.api import ROOT, Frame
from viewer.atomic import write_bytes, write_text
from viewer.kinds import is_hot
from viewer.merge import Node, RankLabels, Tree


DOT_TIMEOUT_S = 60.0
DOT_MAX_SIZE = 4 << 20


def size_text(n: int) -> str:
    """A size the way --dot-max-size reads it: ``4M``, ``1K``, ``1500``."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Dot:
    def __init__(self, world: int, title: str, table: Sequence[int] | None = None,
                 timeout_s: float = DOT_TIMEOUT_S, max_size: int = DOT_MAX_SIZE):
        """``timeout_s``, ``max_size``: the limits on `dot` (--dot-timeout, --dot-max-size)."""
        self.world, self.title, self.table = world, title, table
        self.timeout_s, self.max_size = timeout_s, max_size
        self.tree = Tree()
        self.rendered: str | None = None  # how stacks.svg came about, for the CLI to report

    def add_stack(self, thread: str, frames: Sequence[Frame], ranks: int) -> None:
        self.tree.add(thread, frames, ranks)

    def _chain(self, node: Node) -> tuple[list[Node], Node]:
        """Follow single children that keep the same rank set."""
        chain = [node]
        while len(node.children) == 1:
            (nxt,) = node.children.values()
            if nxt.ranks != node.ranks:
                break
            chain.append(nxt)
            node = nxt
        return chain, node

    def render(self) -> str:
        tree = self.tree.finish()
        labels = RankLabels(self.world, limit=60, table=self.table)
        lines = ["digraph stacks {", f"  label={_q(self.title)}; labelloc=t; rankdir=TB;",
                 '  node [shape=box, style="rounded,filled", fontname="monospace", fontsize=10];']
        ids = 0
        todo: list[tuple[Node, int | None, int]] = [(tree.root, None, tree.root.width)]
        while todo:
            node, parent, thread_w = todo.pop()
            chain, last = self._chain(node) if node.frame.kind != ROOT else ([node], node)
            thread_w = node.width if node.frame.kind == "thread" else thread_w
            names = [n.frame.label for n in chain]
            if len(names) > 3:
                names = [names[0], f"… {len(names) - 2} frames …", names[-1]]
            ranks = (f"{self.world} ranks" if node.frame.kind == ROOT else
                     f"ranks {labels.fold(node.ranks)} ({node.width})")
            hot = node.frame.kind not in (ROOT, "thread") and is_hot(node.width, thread_w)
            fill = "#f4a6a0" if hot else "#e8eef7"
            lines.append(f"  n{ids} [label={_q(chr(10).join(names + [ranks]))}, fillcolor={_q(fill)}];")
            if parent is not None:
                lines.append(f"  n{parent} -> n{ids} [penwidth={1 + 3 * node.width / max(thread_w, 1):.1f}];")
            for c in reversed(last.sorted_children()):
                todo.append((c, ids, thread_w))
            ids += 1
        lines.append("}")
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        text = self.render()
        write_text(path, text)
        svg = path.with_suffix(".svg")
        by_hand = f"render with `dot -Tsvg {path} -o {svg}`"
        source = text.encode("utf-8")
        if len(source) > self.max_size:
            self.rendered = (f"{svg.name} not drawn: {path.name} is {len(source)} B, over --dot-max-size "
                             f"{size_text(self.max_size)}; {by_hand} (or raise the limit)")
            return
        try:
            import graphviz  # a dependency; it runs the `dot` program, which is not
            from graphviz.backend import dot_command, execute
        except ImportError:
            self.rendered = f"the graphviz Python package is missing: {by_hand}"
            return
        try:
            # The package's own pipe() has no time limit; its run_check passes one to subprocess.run,
            # which kills dot when it expires.
            data = execute.run_check(dot_command.command("dot", "svg"), input=source, capture_output=True,
                                     quiet=True, timeout=self.timeout_s).stdout
        except graphviz.ExecutableNotFound:
            self.rendered = f"graphviz not installed: {by_hand}"
            return
        except subprocess.TimeoutExpired:
            self.rendered = (f"{svg.name} not drawn: dot ran past --dot-timeout {self.timeout_s:g}s and was "
                             f"stopped; {by_hand} (or raise the limit)")
            return
        except (graphviz.CalledProcessError, OSError) as e:
            self.rendered = f"dot failed ({e.__class__.__name__}); {by_hand}"
            return
        write_bytes(svg, data)
        self.rendered = f"rendered {svg}"
