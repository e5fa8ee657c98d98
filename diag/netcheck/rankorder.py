"""A topology-aware rank order from what netcheck measured (pure logic, no I/O but the file).

Ring collectives run faster when ring neighbours share a switch. DLRover
orders nodes from a switch map typed into a configmap; here the map is
derived from the pairwise bandwidth: the pair figures are split at their
largest ratio gap (when it is at least ``GAP`` x; else all nodes are one
group), and nodes joined by a pair above the gap form one group (connected components),
groups ordered by their lowest node rank, nodes in a group by node rank.
A switch map (``--topology FILE``: JSON hostname/address/name -> switch)
overrides the grouping. The file written (``--rank-order FILE``)::

    {"version": 1, "source": "measured" | "topology",
     "order": {"<node rank>": <suggested rank>, ...},
     "groups": [[{"node_rank": 0, "node": "vm#0", "hostname": "vm", "addr": "10.0.0.1"}, ...], ...],
     "pairs": [{"a": 0, "b": 1, "busbw": 1.2}, ...]}

``xpu_timer_launch --rank-order FILE`` reads it (diag/launcher/rankorder.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from diag.common.atomic import write_atomic

GAP = 2.0      # a slower tier is at least this many times slower; noise on a busy host stays under it
VERSION = 1


@dataclass(frozen=True)
class NodeId:
    node_rank: int
    node: str
    hostname: str = ""
    addr: str = ""

    def keys(self) -> list[str]:
        return [k for k in (self.node, self.hostname, self.addr) if k]


def round_robin(units: list[int]) -> list[list[tuple[int, int]]]:
    """Every pair once, in len-1 rounds of disjoint pairs (the circle method)."""
    ring = list(units) + ([None] if len(units) % 2 else [])
    rounds = []
    for _ in range(len(ring) - 1):
        half = len(ring) // 2
        pairs = [(ring[i], ring[-1 - i]) for i in range(half)]
        rounds.append([tuple(sorted(p)) for p in pairs if None not in p])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return [r for r in rounds if r]


def group_measured(nodes: list[NodeId], busbw: dict[frozenset, float]) -> list[list[NodeId]]:
    """Connected components over the pairs above the largest ratio gap."""
    cut = close_threshold(list(busbw.values()))
    parent = {n.node_rank: n.node_rank for n in nodes}

    def root(r: int) -> int:
        while parent[r] != r:
            r = parent[r]
        return r
    for pair, bw in busbw.items():
        a, b = sorted(pair)
        if bw >= cut and a in parent and b in parent:
            parent[root(b)] = root(a)
    groups: dict[int, list[NodeId]] = {}
    for n in nodes:
        groups.setdefault(root(n.node_rank), []).append(n)
    return _sorted_groups(groups.values())


def close_threshold(figures: list[float]) -> float:
    """The lowest figure above the largest ratio gap (>= GAP); 0 (all close) without one."""
    values = sorted(v for v in figures if v > 0)
    gaps = [(values[i + 1] / values[i], values[i + 1]) for i in range(len(values) - 1)]
    ratio, cut = max(gaps, default=(1.0, 0.0))
    return cut if ratio >= GAP else 0.0


def group_by_switch(nodes: list[NodeId], switches: dict[str, str], path: str) -> list[list[NodeId]]:
    groups: dict[str, list[NodeId]] = {}
    for n in nodes:
        switch = next((switches[k] for k in n.keys() if k in switches), None)
        if switch is None:
            raise ValueError(f"--topology {path}: no switch for node rank {n.node_rank} "
                             f"({', '.join(n.keys())}); add one of these names")
        groups.setdefault(switch, []).append(n)
    return _sorted_groups(groups.values())


def _sorted_groups(groups) -> list[list[NodeId]]:
    out = [sorted(g, key=lambda n: n.node_rank) for g in groups]
    return sorted(out, key=lambda g: g[0].node_rank)


def load_topology(path: str) -> dict[str, str]:
    """--topology FILE: JSON object name -> switch. Raises ValueError (one line)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--topology {path}: cannot read it ({exc}); give a JSON object "
                         '{"hostname": "switch", ...}') from None
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise ValueError(f'--topology {path}: must be a JSON object {{"hostname": "switch", ...}}')
    return doc


def document(groups: list[list[NodeId]], busbw: dict[frozenset, float], source: str) -> dict[str, Any]:
    order, suggested = {}, 0
    for g in groups:
        for n in g:
            order[str(n.node_rank)] = suggested
            suggested += 1
    return {"version": VERSION, "source": source, "order": order,
            "groups": [[{"node_rank": n.node_rank, "node": n.node, "hostname": n.hostname, "addr": n.addr}
                        for n in g] for g in groups],
            "pairs": [{"a": min(p), "b": max(p), "busbw": bw} for p, bw in sorted(busbw.items(), key=lambda x: sorted(x[0]))]}


def write(path: str, doc: dict[str, Any]) -> None:
    write_atomic(os.fspath(path), (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
