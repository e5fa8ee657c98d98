"""What every parser builds its frames with: interned frames, short native
names. A module of its own so that the parsers and the package that picks
among them (``parse_file``) import it, not each other."""

from __future__ import annotations

import re

from viewer.api import Frame

_frames: dict[Frame, Frame] = {}
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")


def frame(func: str, file: str, line: int, kind: str, lib: bool = False) -> Frame:
    """An interned Frame: equal frames of 16k ranks share one object.

    Raw addresses are replaced by ``??``: ASLR makes them differ per rank,
    and they would split every merge at the root.
    """
    if _HEX.match(func):
        func = "??"
    f = Frame(func, file, line, kind, lib)
    return _frames.setdefault(f, f)


def native_name(name: str) -> str:
    """Shorten a demangled C++ name: template arguments and inner parameter
    lists fold to ``<…>`` / ``(…)``, the trailing parameter list goes:
    ``c10d::Work::wait(std::chrono::duration<long, …>)`` -> ``c10d::Work::wait``.
    Labels get short, and overloads that differ only in their arguments merge
    (gdb, which prints no parameter types, behaves the same way).
    """
    if "operator" in name or not any(c in name for c in "(<"):
        return name
    out, depth, inner, opener = [], 0, [], ""
    for ch in name:
        if depth == 0 and ch in "(<":
            depth, opener, inner = 1, ch, []
            continue
        if depth:
            if ch == opener:
                depth += 1
            elif ch == {"(": ")", "<": ">"}[opener]:
                depth -= 1
                if depth == 0:
                    kept = "".join(inner) == "anonymous namespace"
                    out.append(f"({''.join(inner)})" if kept else ("(…)" if opener == "(" else "<…>"))
                    continue
            inner.append(ch)
            continue
        out.append(ch)
    if depth:
        return name
    short = "".join(out)
    return short[:-3] if short.endswith("(…)") and len(short) > 3 else short


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]
