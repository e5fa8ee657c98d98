"""Asks NCCL RAS for its view of the job (docs/link.md), as NCCL's own
``ncclras`` client does (src/ras/client.cc, NCCL 2.28: protocol 2).

RAS (NCCL 2.24+, on unless NCCL_RAS_ENABLE=0) listens on NCCL_RAS_ADDR,
default localhost:28028, on every node that runs NCCL processes; its status
covers the whole job (the RAS threads of all processes talk to each other).
The exchange: ``CLIENT PROTOCOL 2`` -> ``SERVER PROTOCOL n``, ``TIMEOUT t``
-> ``OK``, ``VERBOSE STATUS`` -> text until the server closes.

Bounded: connect and every read time out; the whole answer is capped. No RAS
(nothing listens): None, and nothing is written.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from diag.common import dumpnames, envnames
from diag.common import safe_dirs

DEFAULT_ADDR = "localhost:28028"
PROTOCOL = 2
RAS_TIMEOUT_S = 5            # the collectives RAS runs among its peers (its own default leg timeout)
MAX_BYTES = 4 << 20
RAS_FILE = dumpnames.NCCL_RAS_TXT


def _addr(env: dict | None = None) -> tuple[str, int]:
    value = (env if env is not None else os.environ).get(envnames.NCCL_RAS_ADDR) or DEFAULT_ADDR
    host, _, port = value.rpartition(":")
    try:
        return host or "localhost", int(port)
    except ValueError:
        host, port = DEFAULT_ADDR.split(":")
        return host, int(port)


def _line(sock: socket.socket) -> str:
    buf = b""
    while not buf.endswith(b"\n") and len(buf) < 4096:
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf.decode("utf-8", "replace")


def ask(addr: tuple[str, int] | None = None, deadline_s: float = 20.0) -> str | None:
    """RAS's verbose status text, or None when no RAS answers. Never raises
    for the network; gives up at ``deadline_s``."""
    host, port = addr or _addr()
    end = time.monotonic() + deadline_s
    try:
        with socket.create_connection((host, port), timeout=min(2.0, deadline_s)) as sock:
            sock.settimeout(max(0.1, min(RAS_TIMEOUT_S * 2 + 2, end - time.monotonic())))
            sock.sendall(f"CLIENT PROTOCOL {PROTOCOL}\n".encode())
            if not _line(sock).upper().startswith("SERVER PROTOCOL"):
                return None
            sock.sendall(f"TIMEOUT {RAS_TIMEOUT_S}\n".encode())
            if _line(sock).strip().upper() != "OK":
                return None
            sock.sendall(b"VERBOSE STATUS\n")
            chunks, size = [], 0
            while size < MAX_BYTES and time.monotonic() < end:
                sock.settimeout(max(0.1, end - time.monotonic()))
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None


def ask_in_background(event_dir: str, log, addr: tuple[str, int] | None = None,
                      deadline_s: float = 20.0) -> threading.Thread:
    """Off the hang path: a daemon thread asks RAS and writes ``nccl_ras.txt``
    into the event dir when it answers."""
    def run() -> None:
        text = ask(addr, deadline_s)
        if text is None:
            return
        try:
            safe_dirs.write_file(os.path.join(event_dir, RAS_FILE), text.encode())
            log(f"NCCL RAS status in {os.path.join(event_dir, RAS_FILE)}")
        except OSError as exc:   # safe_dirs' line names the directory and why
            safe_dirs.say_once(log, exc)

    thread = threading.Thread(target=run, name="xpu-diag-nccl-ras", daemon=True)
    thread.start()
    return thread
