"""Small network helpers."""

from __future__ import annotations

import random
import socket

_LOWEST = 10000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on host right now, for a server that binds it later.

    Drawn at random below the ephemeral range: a port the OS hands out
    (bind to 0) comes from that range, which every outgoing connection and
    every port-0 listener of every process also draws from, so between this
    probe and the server's bind one of them could take it (a job's TCPStore
    failed with EADDRINUSE that way beside a busy test suite). Below it only
    another explicit binder races, as with any such probe. Where the range
    leaves no room, the OS picks."""
    top = _ephemeral_low() - 2          # a launcher's collector takes the master port + 1
    for _ in range(50 if top > _LOWEST else 0):
        port = random.randint(_LOWEST, top)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def resolve_ipv4(host: str) -> str:
    """``host``'s first IPv4 address (a literal comes back as it is). Raises OSError."""
    return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]


def route_source(dest: str, port: int = 9) -> str:
    """The local address the kernel would send from to reach ``dest``, as ``ip route get`` says.

    A connected UDP socket sends nothing; it only makes the kernel choose the
    route and the source address. Raises OSError when there is no route.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((dest, port))
        return s.getsockname()[0]


def iface_of(addr: str) -> str | None:
    """The interface that holds IPv4 ``addr`` (Linux SIOCGIFADDR), or None."""
    for _, name in socket.if_nameindex():
        if iface_addr(name) == addr:
            return name
    return None


def iface_addr(name: str) -> str | None:
    """Interface ``name``'s IPv4 address, or None (no such interface, no address, not Linux)."""
    import fcntl
    import struct
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        except OSError:
            return None
    return socket.inet_ntoa(raw[20:24])


def is_loopback(addr: str) -> bool:
    return addr.startswith("127.") or addr == "::1"


def local_addrs() -> list[str]:
    """Every IPv4 address on this host's (this namespace's) interfaces."""
    addrs = (iface_addr(name) for _, name in socket.if_nameindex())
    return [a for a in addrs if a]
