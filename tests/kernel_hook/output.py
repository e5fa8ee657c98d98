"""Reading a child's merged output line by line without ever blocking past a deadline."""

import os
import select
import signal
import subprocess
import time


def wait_for_line(proc, predicate, deadline, echo=False):
    """Lines of proc.stdout (a binary pipe) until predicate(line) is true.

    Returns (matching line or None, every line read so far). None also when
    the child closed its output or the deadline passed.
    """
    seen, buf = [], b""
    while time.time() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
        if ready and not chunk:
            break  # the child exited
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            seen.append(line)
            if echo:
                print(line, flush=True)
            if predicate(line):
                return line, seen
    return None, seen


def stop_session(proc, grace=30):
    """Teardown: SIGTERM the child's whole session, SIGKILL it if it lingers."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace)
