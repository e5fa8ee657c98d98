"""``py-spy dump --json`` (with or without ``--native``).

The file is a JSON list of thread objects, innermost frame first. A truncated
file still yields every complete thread object before the cut: the list is
decoded one element at a time, and the broken tail counts as one bad line.
"""

from __future__ import annotations

import json
import re

from viewer.api import NATIVE, PYTHON, Frame, ParseResult, ThreadStack
from viewer.kinds import TRACER_FRAME, is_library
from viewer.parsers.frames import basename, frame, native_name

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


_cache: dict[tuple, Frame] = {}
# The memo holds its keys' strings: dumps in which every frame differs would
# keep a copy of each, more than the input itself. Past this many it starts
# over; frames that repeat (ranks stuck alike) come back at once.
_MAX_CACHED = 1 << 16


def _frame(f: dict) -> Frame:
    """Frame for one py-spy frame object; memoised, as 16k ranks repeat the same frames."""
    key = (f["name"], f.get("module"), f.get("short_filename"), f.get("filename"), f.get("line"))
    fr = _cache.get(key)
    if fr is None:
        if len(_cache) >= _MAX_CACHED:
            _cache.clear()
        module = f.get("module")
        if module:
            fr = frame(native_name(str(f["name"])), basename(module), 0, NATIVE)
        else:
            short = f.get("short_filename") or basename(str(f.get("filename") or "?"))
            fr = frame(str(f["name"]), short, int(f.get("line") or 0), PYTHON,
                       is_library(str(f.get("filename") or ""), short))
        _cache[key] = fr
    return fr


def _thread(obj: dict) -> ThreadStack:
    # The tracer's wrapper sits between the user's call and torch's: not user code.
    frames = tuple(f for f in map(_frame, reversed(obj["frames"])) if f.func != TRACER_FRAME)
    name = str(obj.get("thread_name") or "thread")
    tid = int(obj.get("os_thread_id") or obj.get("thread_id") or 0)
    return ThreadStack(name, tid, frames)


# Fast path. At scale most ranks' dumps are the same text except for pids,
# thread ids and raw addresses; those numbers are cut out and the rest is the
# key of a parsed template, so json decoding runs once per distinct dump. The
# split has a literal prefix, so it scans ~5x faster than json.loads decodes.
_NUMBERS = re.compile(r'("(?:pid|thread_id|os_thread_id|name)": (?:\d+|"0x[0-9a-fA-F]+"))')
# Keyed by the shape's hash, length and a sparse sample of it, not the shape
# itself: 64 distinct dumps of 1 MB each would keep 64 MB of text. (The str
# hash is what a dict keyed by the text computed anyway; a digest of every
# byte cost 2.4 CPU-seconds at 16,384 ranks.)
_templates: dict[tuple, tuple[list[tuple[str, tuple[Frame, ...]]], int]] = {}
_MAX_TEMPLATES = 64
FAST_PATH = True  # off only to measure against (bench/viewer_scale.py)


def _ids(values: list[str]) -> tuple[int | None, list[int]]:
    """(pid, os thread ids in file order) from the cut-out numbers."""
    pid, tids = None, []
    for v in values:
        key, _, num = v.partition(": ")
        if key == '"pid"':
            pid = int(num)
        elif key == '"os_thread_id"':
            tids.append(int(num))
    return pid, tids


def parse(text: str) -> ParseResult:
    if not FAST_PATH:
        return _parse_json(text)
    pieces = _NUMBERS.split(text)
    text_shape = "".join(pieces[::2])
    shape = (hash(text_shape), len(text_shape), text_shape[::4093])
    pid, tids = _ids(pieces[1::2])
    tpl = _templates.get(shape)
    if tpl is not None and len(tpl[0]) == len(tids):
        threads = [ThreadStack(name, tid, frames, is_main=(tid == pid)) for (name, frames), tid in zip(tpl[0], tids)]
        return ParseResult(threads, tpl[1], pid)
    result = _parse_json(text)
    if len(result.threads) == len(tids) and all(t.tid == tid for t, tid in zip(result.threads, tids)):
        if len(_templates) >= _MAX_TEMPLATES:
            _templates.clear()
        _templates[shape] = ([(t.name, t.frames) for t in result.threads], result.bad_lines)
    return result


def _parse_json(text: str) -> ParseResult:
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
