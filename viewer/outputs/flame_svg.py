"""Interactive flame graph (icicle: root on top, thread names below it).

Width of a frame = number of ranks whose stack passes through it. A frame is
not dropped for being narrow (one rank of 16,384 still gets a 0.5 px sliver
in its saturated "hot" colour); click a frame to zoom to it. Only where the
boxes would pass ``MAX_BOXES`` (dumps in which nothing agrees: every frame
of every thread distinct) are a node's children narrower than a width merged
into one box that says how many it holds, as flamegraph.pl's --minwidth
does, the narrowest width that keeps the picture under the cap; the subtitle
says so, and the folded output keeps every frame.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Sequence

from viewer.api import NATIVE, ROOT, THREAD, Frame
from viewer.atomic import write_text
from viewer.kinds import COLOURS, LEGEND, colour, is_hot, is_wait, kind_of
from viewer.load import MAIN
from viewer.merge import Node, RankLabels, Tree
from viewer.outputs.flame_js import SCRIPT

WIDTH, PAD, ROW, HEADER, FOOTER, CHAR = 1200, 10, 17, 76, 34, 6.6
MAX_ODD = 6  # header links to the groups of ranks that went another way
# A box is 350-800 bytes of SVG (its label and rank list twice): at this many
# the picture stays under 10 MB, which a browser opens at ease.
MAX_BOXES = 12_000
MIN_PX_STEPS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
_CSS = """
text { font-family: monospace; font-size: 11px; fill: #000; }
g.f text { pointer-events: none; }
g.f:hover rect { stroke: #000; stroke-width: 0.7; }
g.hot text { fill: #fff; }
g.anc rect { opacity: 0.55; }
.btn { cursor: pointer; fill: #2255aa; }
.odd { fill: #b22222; }
#title { font-size: 16px; font-weight: bold; }
"""


def _svg(height: int, body: list[str], title: str, units: int) -> str:
    return "\n".join([
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>',
        f'<svg id="flame" version="1.1" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" data-width="{WIDTH}" '
        f'data-units="{units}" data-char="{CHAR}">',
        f"<title>{escape(title)}</title>",
        f"<style>{_CSS}</style>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#fbfbf7"/>',
        *body,
        f"<script type=\"text/ecmascript\"><![CDATA[{SCRIPT}]]></script>",
        "</svg>", ""])


def error_svg(title: str, message: str) -> str:
    """The explicit 'nothing to show' picture: never an empty graph."""
    body = [f'<text id="title" x="{PAD}" y="28">{escape(title)}</text>',
            f'<text x="{PAD}" y="58" style="fill:#b00;font-size:14px">ERROR: {escape(message)}</text>',
            '<text id="details" x="10" y="90"> </text><text id="unzoom"/><text id="matched"/>']
    return _svg(100, body, title, 0)


def _fit(label: str, w: float) -> str:
    n = int((w - 6) // CHAR)
    if n < 3:
        return ""
    return label if len(label) <= n else label[: n - 2] + ".."


def _header(title: str, subtitle: str) -> list[str]:
    out = [f'<text id="title" x="{PAD}" y="22">{escape(title)}</text>',
           f'<text x="{PAD}" y="40">{escape(subtitle)}</text>',
           f'<text id="unzoom" class="btn" x="{PAD}" y="60" style="opacity:0">Reset Zoom</text>',
           f'<text id="searchbtn" class="btn" x="{WIDTH - PAD - 60}" y="22">Search</text>',
           f'<text id="matched" x="{WIDTH - PAD - 360}" y="60"> </text>']
    x = 120
    for kind, name in LEGEND:
        pale, hot = COLOURS[kind]
        out.append(f'<rect x="{x}" y="51" width="10" height="10" fill="{hot}"/>'
                   f'<rect x="{x + 11}" y="51" width="10" height="10" fill="{pale}"/>'
                   f'<text x="{x + 25}" y="60">{name}</text>')
        x += 40 + 7 * len(name)
    out.append(f'<text x="{x}" y="60">(dark = few ranks, pale = most)</text>')
    return out


class FlameSvg:
    """Writer: one flame graph of one view (Python or native frames)."""

    def __init__(self, title: str, subtitle: str, world: int, html: bool = False, culprits: int = 0,
                 table: Sequence[int] | None = None):
        """``culprits``: bitset of the ranks hang.json names (culprits, never
        entered); their groups are linked first, even in a 1-against-1 split.
        ``table``: the rank number of each bit (see merge.RankLabels)."""
        self.title, self.subtitle, self.world, self.html = title, subtitle, world, html
        self.table = table
        self.culprits = culprits
        self.units = 0
        self.tree = Tree()
        self.odd: list = []
        self.forks: list = []
        self.ids: dict[int, str] = {}

    def add_stack(self, thread: str, frames: Sequence[Frame], ranks: int) -> None:
        self.tree.add(thread, frames, ranks)

    def _weights(self) -> dict[int, int]:
        """id(thread node) -> how many layout units one rank counts for.

        Every thread of every rank is one unit, so with 8 threads a rank the
        main thread would get an eighth of the page, and at 1,024 ranks its
        odd frames a sliver. The main thread, where hangs show, is weighted
        to half the page (a whole factor, so zoom stays exact)."""
        threads = list(self.tree.root.children.values())
        main = next((t for t in threads if t.frame.func == MAIN), None)
        if main is None or not main.width:
            return {}
        others = sum(t.width for t in threads) - main.width
        factor = -(-others // main.width)   # ceil
        return {id(main): factor} if factor > 1 else {}

    def _frames(self) -> tuple[list[str], int]:
        tree = self.tree
        labels = RankLabels(self.world, table=self.table)
        weights, scale = self._scale()
        units = max(sum(t.width * weights.get(id(t), 1) for t in tree.root.children.values()), 1)
        self.units = units
        out, max_depth, ident, thread_name = [], 0, 0, ""
        top = HEADER + ROW * len(self.odd)
        culprits = self.culprits
        stack = [(tree.root, 0, 0, tree.root.width, False, 1, False)]
        while stack:
            node, depth, x, thread_w, parent_hot, k, parent_blamed = stack.pop()
            f, w = node.frame, node.width
            if f.kind == THREAD:
                thread_w, thread_name, k = w, f.func, weights.get(id(node), 1)
            max_depth = max(max_depth, depth)
            hot = f.kind not in (ROOT, THREAD) and is_hot(w, thread_w)
            # Only ranks hang.json blames pass here: their branch, even 1 against 1.
            blamed = bool(culprits) and f.kind not in (ROOT, THREAD) and not node.ranks & ~culprits
            uw = units if f.kind == ROOT else w * k
            if f.kind == ROOT:
                label, info = f"all ({self.world} ranks)", f"{w} rank-threads"
            else:
                label = labels.label(f, node.ranks)
                info = f"{w} of {thread_w} ranks ({100.0 * w / max(thread_w, 1):.1f}%), {kind_of(f)}"
            fill = colour(f, hot)
            self.ids[id(node)] = f"f{ident}"
            if (hot and not parent_hot) or (blamed and not parent_blamed and w < thread_w):
                self.forks.append((node, thread_name))
            px, pw, py = PAD + x * scale, max(uw * scale, 2.0 if hot else 0.5), top + depth * ROW
            out.append(
                f'<g id="f{ident}" class="f{" hot" if hot else ""}" data-x="{x}" data-w="{uw}" '
                f'data-d="{depth}" data-c="{fill}" data-n="{escape(info)}" data-l="{escape(label)}">'
                f"<title>{escape(label)}\n{escape(info)}</title>"
                f'<rect x="{px:.2f}" y="{py}" width="{pw:.2f}" height="{ROW - 1}" fill="{fill}" rx="2"/>'
                f'<text x="{px + 3:.2f}" y="{py + ROW - 5}">{escape(_fit(label, pw))}</text></g>')
            ident += 1
            kids, cx = node.sorted_children(), x
            starts = []
            for c in kids:
                starts.append(cx)
                cx += c.width * (weights.get(id(c), 1) if f.kind == ROOT else k)
            for c, cx in reversed(list(zip(kids, starts))):
                stack.append((c, depth + 1, cx, thread_w, hot, k, blamed))
        return out, max_depth

    def _odd(self) -> list[tuple[Node, Node, str]]:
        """(zoom target, innermost frame, thread) per group of minority ranks.

        Below each fork into a minority, every distinct stack end is one
        group; its zoom target is the highest frame that holds exactly it.
        A thread other than the main one that waits in libc is parked, not
        stuck: a gloo runLoop waiting for work or for its peer, a pool
        thread. Each rank's main thread says where that rank is stuck; linking
        its parked threads made a one-rank hang read as one per rank.
        """
        out = []
        for fork, thread in self.forks:
            todo = [(fork, None)]
            while todo:
                node, target = todo.pop()
                below = 0
                for c in node.children.values():
                    below |= c.ranks
                own = node.ranks & ~below
                if own and (thread == MAIN or not is_wait(node.frame)):
                    out.append((target if target is not None and target.ranks == own else node, node, thread))
                for c in reversed(node.sorted_children()):
                    todo.append((c, target if target is not None and target.ranks == c.ranks else c))
        seen, unique = set(), []
        for item in out:   # a fork can be both a minority and blamed
            if (id(item[0]), id(item[1])) not in seen:
                seen.add((id(item[0]), id(item[1])))
                unique.append(item)
        unique.sort(key=self._relevance)
        return unique[:MAX_ODD]

    def _relevance(self, group) -> tuple:
        """Sort key, most relevant first: the main thread (where a hang shows);
        then groups with ranks hang.json blames; then fewest ranks."""
        target, _, thread = group
        return (thread != MAIN, not target.ranks & self.culprits, target.width)

    def _odd_links(self, labels: RankLabels) -> list[str]:
        """Header links to the minority groups, most relevant first (click: zoom)."""
        out = []
        for i, (target, leaf, thread) in enumerate(self.odd):
            n = target.width
            text = f"{'rank' if n == 1 else 'ranks'} {labels.fold(target.ranks)} ({thread}) stuck in {leaf.frame.label}"
            out.append(f'<text class="btn odd" data-target="{self.ids[id(target)]}" x="{PAD}" '
                       f'y="{HEADER + ROW * i + 2}">▶ {escape(text)}</text>')
        return out

    def _scale(self) -> tuple[dict[int, int], float]:
        weights = self._weights()
        units = max(sum(t.width * weights.get(id(t), 1) for t in self.tree.root.children.values()), 1)
        return weights, (WIDTH - 2 * PAD) / units

    def _boxes(self, min_px: float, weights: dict[int, int], scale: float) -> int:
        """The boxes drawn were the children narrower than ``min_px`` merged."""
        count, todo = 1, [(self.tree.root, 1)]
        while todo:
            node, k = todo.pop()
            narrow = False
            for c in node.children.values():
                ck = weights.get(id(c), 1) if node is self.tree.root else k
                if c.width * ck * scale < min_px:
                    narrow = True
                else:
                    count += 1
                    todo.append((c, ck))
            count += narrow
            if count > MAX_BOXES:
                break
        return count

    def _merge_narrow(self) -> str:
        """Past MAX_BOXES, merge each node's children narrower than the least
        width that keeps the picture under it into one box; returns what the
        subtitle says of it ("" when nothing was merged)."""
        weights, scale = self._scale()
        if self._boxes(0.0, weights, scale) <= MAX_BOXES:
            return ""
        min_px = next((px for px in MIN_PX_STEPS if self._boxes(px, weights, scale) <= MAX_BOXES), MIN_PX_STEPS[-1])
        merged, boxes, todo = 0, 0, [(self.tree.root, 1)]
        while todo:
            node, k = todo.pop()
            narrow = []
            for key, c in node.children.items():
                ck = weights.get(id(c), 1) if node is self.tree.root else k
                if c.width * ck * scale < min_px:
                    narrow.append(key)
                else:
                    todo.append((c, ck))
            if not narrow:
                continue
            kinds = {node.children[key].frame.kind for key in narrow}
            kind = kinds.pop() if len(kinds) == 1 else NATIVE
            box = Node(Frame(f"({len(narrow)} frames under {min_px:g} px, merged)", "", 0, kind))
            for key in narrow:
                c = node.children.pop(key)
                box.ranks |= c.ranks
                box.width += c.width
            node.children[box.frame] = box
            merged += len(narrow)
            boxes += 1
        return f"; {merged} frames narrower than {min_px:g} px merged into {boxes} boxes (the folded output has them all)"

    def render(self) -> str:
        if not self.tree.root.children:
            return error_svg(self.title, "no usable stacks")
        self.tree.finish()
        merged = self._merge_narrow()
        if merged:
            self.subtitle += merged
        self.odd, self.forks = [], []
        self._frames()  # first pass finds the forks, which sit in the header
        self.odd = self._odd()
        frames, depth = self._frames()
        height = HEADER + ROW * len(self.odd) + (depth + 1) * ROW + FOOTER
        body = (_header(self.title, self.subtitle) + self._odd_links(RankLabels(self.world, limit=60, table=self.table))
                + frames + [f'<text id="details" x="{PAD}" y="{height - 12}"> </text>'])
        return _svg(height, body, self.title, self.units)

    def write(self, path: Path) -> None:
        svg = self.render()
        if self.html:
            svg = ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>"
                   f"{escape(self.title)}</title></head><body style=\"margin:0\">\n"
                   + svg.split("\n", 1)[1] + "</body></html>\n")
        write_text(path, svg)
