"""The HANG verdict's link clause (docs/link.md): on a hang where every member
of the group waits in the same collective at the same seq, compare the
members' NCCL step counters (diag.link.analysis) and name the link; put both
of its nodes on the event's fault list (faults.json, diag/faultlist.py) so
netcheck re-tests them; ask NCCL RAS for its view (diag.link.ras).
"""

from __future__ import annotations

import logging
from typing import Any

from diag import faultlist
from diag.hang.api import Findings
from diag.collector.state import Snapshot
from diag.hang.links import stuck_links
from diag.link import ras
from diag.link.api import LinkFinding

log = logging.getLogger(__name__)


def node_names(snap: Snapshot) -> dict[int, str]:
    """node rank -> its name in lines: the hostname, ``host#N`` where hostnames repeat."""
    hosts = {n: a.hostname or f"node{n}" for n, a in snap.agents.items()}
    counts: dict[str, int] = {}
    for host in hosts.values():
        counts[host] = counts.get(host, 0) + 1
    return {n: (f"{h}#{n}" if counts[h] > 1 else h) for n, h in hosts.items()}


def find(findings: Findings, snap: Snapshot) -> LinkFinding:
    """The stuck link(s) of this hang; empty when it is not an all-wait hang or no rank sent link data."""
    return stuck_links(findings, snap, node_names(snap))


def fault_entries(doc: dict[str, Any], snap: Snapshot) -> tuple[list[faultlist.FaultEntry], list[dict]]:
    """Both ends of every stuck link in hang.json's ``link`` section, as fault
    list entries and their evidence records."""
    entries, records = [], []
    section = doc.get("link") or {}
    for link in section.get("links") or []:
        reason = (f"NCCL link rank {link['src_rank']} -> rank {link['dst_rank']} stuck at step "
                  f"{link['stuck_step']} during a HANG")
        for rank_key, node_key in (("src_rank", "src_node"), ("dst_rank", "dst_node")):
            entry = snap.ranks.get(link[rank_key])
            node_rank = entry.node_rank if entry is not None else None
            agent = snap.agents.get(node_rank) if node_rank is not None else None
            entries.append(faultlist.FaultEntry(link[node_key], reason, agent.hostname if agent else "", node_rank))
            records.append({"node": link[node_key], "gpu": None, "link": f"{link['src_node']}->{link['dst_node']}",
                            "metric": "nccl_stuck_step", "value": link["stuck_step"], "unit": "step",
                            "verdict": "fail", "reason": reason, "rule": "nccl-link"})
    return entries, records


def ask_ras(doc: dict[str, Any], path: str) -> None:
    """At a HANG, NCCL RAS's view into the event dir (nccl_ras.txt), on a
    thread of its own: the hang path does not wait for it (docs/link.md)."""
    if doc.get("reason") != "hung_op":
        return
    ras.ask_in_background(path, log.info)
