"""Local ports of a process's established TCP sockets (NCCL's, bootstrap's,
the store's): what the link tests drop to break a socket-transport link.
Imported by tests/gpu/test_link_gpu.py and by the worker scripts beside it."""

import os
import re


def established_ports(pid: int | str = "self") -> set[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            m = re.match(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if m:
            inodes.add(m.group(1))
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "01" and cols[9] in inodes:   # ESTABLISHED
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports
