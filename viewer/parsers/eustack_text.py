"""eu-stack text (``eu-stack -p PID``, optionally with ``-m`` and ``-s``).

    PID 5903 - process
    TID 5903:
    #0  0x00007fbb700ed545 clock_nanosleep@GLIBC_2.2.5 - /usr/lib/x86_64-linux-gnu/libc.so.6
        ../sysdeps/unix/sysv/linux/clock_nanosleep.c:48:7          <- with -s
"""

from __future__ import annotations

import re

from viewer.api import NATIVE, ParseResult, ThreadStack
from viewer.parsers.frames import basename, frame, native_name

_PID = re.compile(r"^PID (\d+)")
_TID = re.compile(r"^TID (\d+):\s*$")
# The name may hold spaces (demangled C++); with -m the module follows " - ".
_FRAME = re.compile(r"^#\d+\s+0x[0-9a-fA-F]+\s*(.*?)(?:\s+-\s+(/\S*|\[\S+\]))?\s*$")
_SOURCE = re.compile(r"^\s+(\S+?):(\d+)(?::\d+)?\s*$")
_VERSION = re.compile(r"@@?[A-Z_]+[0-9._]*$")


def parse(text: str) -> ParseResult:
    result = ParseResult()
    threads: list[tuple[int, list]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _PID.match(line)
        if m:
            result.pid = int(m.group(1))
            continue
        m = _TID.match(line)
        if m:
            threads.append((int(m.group(1)), []))
            continue
        m = _FRAME.match(line) if threads else None
        if m:
            func = native_name(_VERSION.sub("", m.group(1))) or "??"
            threads[-1][1].append(frame(func, basename(m.group(2) or ""), 0, NATIVE))
            continue
        s = _SOURCE.match(line) if threads and threads[-1][1] else None
        if s:
            last = threads[-1][1][-1]
            threads[-1][1][-1] = frame(last.func, basename(s.group(1)), int(s.group(2)), NATIVE)
            continue
        result.bad_lines += 1
    for tid, frames in threads:
        result.threads.append(ThreadStack("thread", tid, tuple(reversed(frames)),
                                          is_main=(tid == result.pid)))
    return result
