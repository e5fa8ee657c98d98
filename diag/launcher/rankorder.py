"""``xpu_timer_launch --rank-order FILE``: this node's rank from netcheck's topology-aware order.

With torchrun's static rendezvous (the default; ``--node-rank`` given), the
node rank is what torchrun uses, so it is replaced by the file's suggested
rank for this node, found by address (unique) or else by hostname. With the
c10d (or etcd) rendezvous the agents take ranks in the order they join:
torchrun offers no way to ask for one, so the file is not applied and one
line says so. netcheck keeps node rank 0 first (it serves the static store
at --master-addr); a file that moves it is refused.
"""

from __future__ import annotations

import json
import socket
from typing import Any, Sequence

from diag.common.options import ConfigError

_NODE_RANK = ("--node-rank", "--node_rank")
_BACKEND = ("--rdzv-backend", "--rdzv_backend")


def _value(argv: Sequence[str], names: tuple[str, ...]) -> tuple[int, str | None]:
    """(index of the value, value) of the last ``--x v`` / ``--x=v`` in argv; (-1, None) if absent."""
    found = (-1, None)
    for i, token in enumerate(argv):
        name, eq, val = token.partition("=")
        if name in names:
            found = (i, val) if eq else ((i + 1, argv[i + 1]) if i + 1 < len(argv) else found)
    return found


def load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        order = {int(k): int(v) for k, v in doc["order"].items()}
        groups = [dict(n) for g in doc["groups"] for n in g]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"--rank-order {path}: not a rank order ({exc}); write one with "
                          "netcheck --rank-order FILE") from None
    if order.get(0, 0) != 0:
        raise ConfigError(f"--rank-order {path}: node rank 0 must stay first (it serves the rendezvous "
                          "at --master-addr); write the file with netcheck --rank-order")
    return {"order": order, "nodes": groups}


def this_node(nodes: list[dict[str, Any]], hostname: str, addrs: Sequence[str]) -> tuple[dict, str] | None:
    """The file's entry for this node and what matched (address, then a unique hostname)."""
    for n in nodes:
        if n.get("addr") and n["addr"] in addrs:
            return n, "address"
    named = [n for n in nodes if hostname and hostname.split(".", 1)[0] in
             {str(n.get("hostname", "")).split(".", 1)[0], str(n.get("node", "")).split(".", 1)[0]}]
    return (named[0], "hostname") if len(named) == 1 else None


def apply(path: str, torchrun_argv: list[str], node_rank: int) -> tuple[list[str], int, str]:
    """(torchrun argv, node rank, one line to print) with the file applied where torchrun allows."""
    doc = load(path)
    _, backend = _value(torchrun_argv, _BACKEND)
    if (backend or "static") != "static":
        return torchrun_argv, node_rank, (f"--rank-order: not applied: the {backend} rendezvous assigns node "
                                          "ranks as agents join; use --node-rank with the static rendezvous")
    from diag.common.net import local_addrs
    hit = this_node(doc["nodes"], socket.gethostname(), local_addrs())
    if hit is None:
        raise ConfigError(f"--rank-order {path}: this node ({socket.gethostname()}) is not in it by address "
                          "or hostname; rerun netcheck --rank-order on the job's nodes")
    entry, how = hit
    new = doc["order"].get(int(entry["node_rank"]))
    if new is None:
        raise ConfigError(f"--rank-order {path}: no order for node rank {entry['node_rank']}")
    at, _ = _value(torchrun_argv, _NODE_RANK)
    argv = list(torchrun_argv)
    if at >= 0 and argv[at].startswith(("--node-rank=", "--node_rank=")):
        argv[at] = f"--node-rank={new}"
    elif at >= 0:
        argv[at] = str(new)
    else:
        argv[:0] = ["--node-rank", str(new)]
    return argv, new, (f"--rank-order: node rank {node_rank} -> {new} (matched by {how}: "
                       f"{entry.get('node') or entry.get('hostname')})")
