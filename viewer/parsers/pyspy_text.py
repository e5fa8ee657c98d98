"""Plain ``py-spy dump`` text (with or without ``--native``).

    Thread 5007 (idle): "MainThread"
        inner (stall.py:2)              <- Python frame, innermost first
        clock_nanosleep (libc.so.6)     <- native frame (no line number)
"""

from __future__ import annotations

import re

from viewer.api import NATIVE, PYTHON, ParseResult, ThreadStack
from viewer.kinds import TRACER_FRAME, is_library
from viewer.parsers.frames import frame, native_name

_THREAD = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+) \([^)]*\)(?:: "(.*)")?\s*$')
_PROCESS = re.compile(r"^Process (\d+):")
_PYFRAME = re.compile(r"^\s+(.+) \(([^()]+):(\d+)\)\s*$")
_NATIVE = re.compile(r"^\s+(.+) \(([^():]+)\)\s*$")
# --locals output, header lines and blank lines carry no frames but are valid.
_SKIP = re.compile(r"^(\s*$|Python v|\s{6,}\S|\s+(Arguments|Locals):\s*$)")


def parse(text: str) -> ParseResult:
    result = ParseResult()
    cur: tuple[str, int, list] | None = None

    def close():
        if cur is not None:
            name, tid, frames = cur
            result.threads.append(ThreadStack(name, tid, tuple(reversed(frames)),
                                              is_main=(tid == result.pid)))

    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            close()
            tid = int(m.group(1), 0)
            cur = (m.group(2) or f"thread-{tid}", tid, [])
            continue
        p = _PROCESS.match(line)
        if p:
            result.pid = int(p.group(1))
            continue
        fm = _PYFRAME.match(line)
        if fm and cur is not None:
            if fm.group(1) != TRACER_FRAME:   # the tracer's wrapper: not user code
                cur[2].append(frame(fm.group(1), fm.group(2), int(fm.group(3)), PYTHON,
                                     is_library(fm.group(2), fm.group(2))))
            continue
        fm = _NATIVE.match(line)
        if fm and cur is not None:
            cur[2].append(frame(native_name(fm.group(1)), fm.group(2), 0, NATIVE))
            continue
        if not _SKIP.match(line):
            result.bad_lines += 1
    close()
    return result
