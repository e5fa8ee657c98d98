"""Feed the loaded stack groups to every requested writer and write the files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from diag.common import dumpnames
from viewer.atomic import write_text
from viewer.discover import Event
from viewer.load import Loaded
from viewer.merge import bits_of
from viewer.outputs.dot import DOT_MAX_SIZE, DOT_TIMEOUT_S, Dot
from viewer.outputs.flame_svg import FlameSvg, error_svg
from viewer.outputs.folded import Folded
from viewer.outputs.summary import Context, Summary

FORMATS = ("svg", "html", "folded", "dot", "text")
_VIEW_NAMES = {"py": ("py_stack", "Python"), "native": ("cpp_stack", "native")}


@dataclass
class Result:
    written: list[Path] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    summary: Summary | None = None
    empty: bool = False


def rank_table(loaded: Loaded) -> list[int]:
    """The ranks that have a stack, ascending: bit i of every bitset below is
    rank ``table[i]``, so a bitset is as long as the ranks held, whatever
    rank numbers the file names carry (``rank999999998-of-...``)."""
    return sorted({r for groups in loaded.views.values() for ranks in groups.values() for r in ranks})


def _groups(loaded: Loaded, view: str, index: dict[int, int]) -> list[tuple[str, tuple, int]]:
    return [(thread, frames, bits_of(index[r] for r in ranks))
            for (thread, frames), ranks in loaded.views[view].items()]


def blamed_ranks(hang: dict | None, index: dict[int, int] | None = None) -> int:
    """Bitset of the ranks hang.json blames: its culprits and never_entered.
    ``index``: rank -> bit (ranks without a stack are left out); None: bit r = rank r."""
    hang = hang if isinstance(hang, dict) else {}
    ranks = [r for r in hang.get("culprits") or [] if isinstance(r, int) and r >= 0]
    ranks += [n["rank"] for n in hang.get("never_entered") or []
              if isinstance(n, dict) and isinstance(n.get("rank"), int) and n["rank"] >= 0]
    return bits_of(ranks if index is None else (index[r] for r in ranks if r in index))


def _flames(loaded: Loaded, event: Event, out: Path, formats: set[str], res: Result, table: list[int]) -> None:
    index = {r: i for i, r in enumerate(table)}
    blamed = blamed_ranks(event.hang, index)
    for view, groups in ((v, _groups(loaded, v, index)) for v in ("py", "native")):
        stem, name = _VIEW_NAMES[view]
        title = f"{name} stacks of {event.path.name}"
        n = len(loaded.ranks(view))
        subtitle = (f"{n} of {loaded.world} ranks; width = ranks; label func@file:line@<stuck>|<leak>; "
                    f"click to zoom, Search top right")
        for fmt, ext in (("svg", ".svg"), ("html", ".html")):
            if fmt not in formats:
                continue
            w = FlameSvg(title, subtitle, loaded.world, html=(fmt == "html"), culprits=blamed, table=table)
            for g in groups:
                w.add_stack(*g)
            if not groups:
                why = ("no native dumps (py-spy --native, gdb or eu-stack)" if view == "native"
                       else "no py-spy dumps")
                write_text(out / f"{stem}{ext}", error_svg(title, f"{why} in {event.path}"))
                res.messages.append(f"{stem}{ext}: {why}")
            else:
                w.write(out / f"{stem}{ext}")
            res.written.append(out / f"{stem}{ext}")
        if "folded" in formats and groups:
            f = Folded(loaded.world, table)
            for g in groups:
                f.add_stack(*g)
            f.write(out / f"{stem}.folded")
            res.written.append(out / f"{stem}.folded")


def render(event: Event, loaded: Loaded, out: Path, formats: set[str], dot_timeout_s: float = DOT_TIMEOUT_S,
           dot_max_size: int = DOT_MAX_SIZE) -> Result:
    """Write every output of ``formats`` into ``out``. ``Result.empty``: no stacks at all.
    ``dot_timeout_s``, ``dot_max_size``: the limits on graphviz's dot (outputs/dot.py)."""
    res = Result()
    table = rank_table(loaded)
    view = "py" if loaded.views["py"] else "native"
    res.empty = not loaded.views["py"] and not loaded.views["native"]
    if res.empty:
        msg = f"no usable stacks in {event.path}"
        for stem in ("py_stack", "cpp_stack"):
            write_text(out / f"{stem}.svg", error_svg(f"stacks of {event.path.name}", msg))
            res.written.append(out / f"{stem}.svg")
    else:
        _flames(loaded, event, out, formats, res, table)
    groups = _groups(loaded, view, {r: i for i, r in enumerate(table)})
    if "dot" in formats and groups:
        d = Dot(loaded.world, f"{_VIEW_NAMES[view][1]} call tree of {event.path.name}", table,
                dot_timeout_s, dot_max_size)
        for g in groups:
            d.add_stack(*g)
        d.write(out / "stacks.dot")
        res.written.append(out / "stacks.dot")
        res.messages.append(f"stacks.dot: {d.rendered}")
    ctx = Context(str(event.path), loaded.world, _VIEW_NAMES[view][1], event.hang, loaded.errors,
                  loaded.notes, loaded.bad_lines, [str(p) for p in event.others], table)
    res.summary = Summary(ctx)
    for g in groups:
        res.summary.add_stack(*g)
    if "text" in formats:
        res.summary.write(out / dumpnames.SUMMARY_TXT)
        res.written.append(out / dumpnames.SUMMARY_TXT)
    return res
