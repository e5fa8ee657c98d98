"""``stacks.dot``: the merged call tree, collapsed to where ranks diverge.

A chain of frames that all hold the same ranks becomes one box (first frame,
"… N frames …", last frame), so the picture shows only the forks; every box
carries its folded rank set, and boxes held by a minority are filled red.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from viewer.api import ROOT, Frame
from viewer.atomic import write_bytes, write_text
from viewer.kinds import is_hot
from viewer.merge import Node, RankLabels, Tree


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Dot:
    def __init__(self, world: int, title: str):
        self.world, self.title = world, title
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
        labels = RankLabels(self.world, limit=60)
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
        try:
            import graphviz  # a dependency; it runs the `dot` program, which is not
        except ImportError:
            self.rendered = f"the graphviz Python package is missing: render with `dot -Tsvg {path} -o {svg}`"
            return
        try:
            data = graphviz.Source(text, engine="dot").pipe(format="svg", quiet=True)
        except graphviz.ExecutableNotFound:
            self.rendered = f"graphviz not installed: render with `dot -Tsvg {path} -o {svg}`"
            return
        except (graphviz.CalledProcessError, OSError) as e:
            self.rendered = f"dot failed ({e.__class__.__name__}); render with `dot -Tsvg {path} -o {svg}`"
            return
        write_bytes(svg, data)
        self.rendered = f"rendered {svg}"
