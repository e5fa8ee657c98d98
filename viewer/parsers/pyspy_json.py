"""``py-spy dump --json`` (with or without ``--native``).

The file is a JSON list of thread objects, innermost frame first. A truncated
file still yields every complete thread object before the cut: the list is
decoded one element at a time, and the broken tail counts as one bad line.
"""

from __future__ import annotations

import json

from viewer.api import NATIVE, PYTHON, ParseResult, ThreadStack
from viewer.parsers import basename, frame

_decoder = json.JSONDecoder()


def _elements(text: str):
    """Yield (element or None on error) for each element of a JSON list."""
    i = text.index("[") + 1
    n = len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            obj, i = _decoder.raw_decode(text, i)
        except ValueError:
            yield None
            return
        yield obj


def _thread(obj: dict) -> ThreadStack:
    frames = []
    for f in reversed(obj["frames"]):
        module = f.get("module")
        if module:
            frames.append(frame(str(f["name"]), basename(module), 0, NATIVE))
        else:
            short = f.get("short_filename") or basename(str(f.get("filename") or "?"))
            frames.append(frame(str(f["name"]), short, int(f.get("line") or 0), PYTHON))
    name = str(obj.get("thread_name") or "thread")
    tid = int(obj.get("os_thread_id") or obj.get("thread_id") or 0)
    return ThreadStack(name, tid, tuple(frames))


def parse(text: str) -> ParseResult:
    result = ParseResult()
    if "[" not in text:
        result.bad_lines = max(1, text.count("\n"))
        return result
    for obj in _elements(text):
        try:
            t = _thread(obj)
        except (TypeError, KeyError, ValueError, AttributeError):
            result.bad_lines += 1
            continue
        pid = obj.get("pid")
        if isinstance(pid, int):
            result.pid = pid
            t.is_main = t.tid == pid
        result.threads.append(t)
    return result
