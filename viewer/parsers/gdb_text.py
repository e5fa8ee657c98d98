"""gdb ``thread apply all bt`` text.

    Thread 2 (Thread 0x7fe0525c56c0 (LWP 5013) "python"):
    #0  0x00007fe052aed545 in __GI___clock_nanosleep (clock_id=1, ...) at ../clock_nanosleep.c:48
    #2  time_sleep (self=<optimized out>, ...) at ./Modules/timemodule.c:383   <- inlined, no address
    #3  0x00007f... in ?? () from /usr/lib/libfoo.so

Arguments are dropped (pointer values differ per rank). gdb's own chatter
before the first thread is ignored; unreadable lines after it are counted.
"""

from __future__ import annotations

import re

from viewer.api import NATIVE, ParseResult, ThreadStack
from viewer.parsers.frames import basename, frame, native_name

_THREAD = re.compile(r'^Thread (\d+) \((?:Thread 0x[0-9a-fA-F]+ )?\(?LWP (\d+)\)?(?: "(.*)")?\)?:?\s*$')
_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-fA-F]+ in )?(.+?)(?: \(.*?\))?(?: (?:at|from) (\S+))?\s*$")
_AT_LINE = re.compile(r"^(.*):(\d+)$")
_IGNORE = re.compile(r"^(\s*$|\[Inferior|\[Thread debugging|\[New |Using host|warning:|\d+\s)")


def _frame(m: re.Match):
    func, where = native_name(m.group(1).strip()), m.group(2) or ""
    at = _AT_LINE.match(where)
    if at:
        return frame(func, basename(at.group(1)), int(at.group(2)), NATIVE)
    return frame(func, basename(where), 0, NATIVE)


def parse(text: str) -> ParseResult:
    result = ParseResult()
    threads: list[tuple[int, str, int, list]] = []
    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            threads.append((int(m.group(1)), m.group(3) or "thread", int(m.group(2)), []))
            continue
        if not threads or _IGNORE.match(line):
            continue
        fm = _FRAME.match(line) if line.startswith("#") else None
        if fm:
            threads[-1][3].append(_frame(fm))
        else:
            result.bad_lines += 1
    # gdb's thread 1 is the main thread; its LWP is the pid.
    main = min(threads, default=None)
    if main is not None:
        result.pid = main[2]
    for num, name, lwp, frames in threads:
        result.threads.append(ThreadStack(name, lwp, tuple(reversed(frames)), is_main=(num == main[0])))
    return result
