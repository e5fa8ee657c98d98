"""Small network helpers."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on host right now (the OS picks it; a race with
    another binder remains, as with any such probe)."""
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
