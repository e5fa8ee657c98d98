"""Which address this node's pairs use, chosen without flags where possible.

gloo's default device binds to whatever the hostname resolves to; on many
Debian/Ubuntu hosts and containers that is 127.0.1.1, and every cross-node
pair is then refused. So, unless --iface or GLOO_SOCKET_IFNAME names one, the
address is the one the kernel routes from towards the master, as
``ip route get <master>`` would say. NCCL keeps its own choice
(NCCL_SOCKET_IFNAME) unless the user sets it.
"""

from __future__ import annotations

from dataclasses import dataclass

from diag.common.net import iface_addr, iface_of, is_loopback, resolve_ipv4, route_source
from diag.netcheck.api import NetcheckError
from diag.netcheck.config import Config


@dataclass(frozen=True)
class Endpoint:
    """Where this node's pairs run: ``addr`` on ``iface``; ``how`` says why that one."""

    addr: str
    iface: str | None
    how: str                    # "--iface" | "route to <master>"


def choose(cfg: Config, backend: str = "gloo") -> Endpoint:
    """The endpoint for this node; raises NetcheckError (one line with the fix) when it cannot work."""
    try:
        master = resolve_ipv4(cfg.rdzv.master_addr)
    except OSError as exc:
        raise NetcheckError(f"--master-addr {cfg.rdzv.master_addr}: cannot resolve it ({exc}); "
                            "give node rank 0's address") from None
    if cfg.rdzv.iface:
        addr = iface_addr(cfg.rdzv.iface)
        if addr is None:
            raise NetcheckError(f"--iface {cfg.rdzv.iface} (or GLOO_SOCKET_IFNAME): no such interface with an "
                                f"IPv4 address here; give one listed by `ip -br addr`")
        chosen = Endpoint(addr, cfg.rdzv.iface, f"--iface {cfg.rdzv.iface}")
    else:
        try:
            addr = route_source(master, cfg.rdzv.master_port)
        except OSError as exc:
            raise NetcheckError(f"--master-addr {cfg.rdzv.master_addr}: no route to {master} ({exc}); "
                                "check the network or give --iface") from None
        chosen = Endpoint(addr, iface_of(addr), f"route to {master}")
    # NCCL picks its own interface (never lo by default); only gloo binds where we say.
    if backend == "gloo" and cfg.rdzv.nnodes > 1 and is_loopback(chosen.addr) and not is_loopback(master):
        raise NetcheckError(f"node rank {cfg.rdzv.node_rank}: the {chosen.how} gives loopback {chosen.addr}, which "
                            f"other nodes cannot reach; pass --iface <the interface that reaches {master}>")
    return chosen
