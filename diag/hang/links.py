"""The stuck link behind a hang where every member waits at one seq
(docs/link.md): the members' NCCL step counters compared (diag.link.analysis).
The HANG line's link clause and the frozen_link verdict rule read it."""

from __future__ import annotations

from diag.hang.api import Case, Findings, Rule, View
from diag.link import analysis, wire
from diag.link.api import LinkFinding


def all_wait_same(findings: Findings) -> bool:
    """Every hung rank is in one collective (same group, lane and seq) and no
    rank is behind, missing, silent or out of step: what the link view is for."""
    ops = [g.op for g in findings.hung]
    if not ops or not all(op.is_comm_op for op in ops):
        return False
    seqs = set()
    for op in ops:
        stuck = findings.stuck_at(op)
        seqs.add((op.comm_id, op.kind, stuck.seq if stuck else op.seq))
    return (len(seqs) == 1 and not findings.culprits and not findings.mismatches and not findings.suspects
            and not findings.never_entered and not findings.missing_ranks and not findings.silent_agents)


def stuck_links(findings: Findings, view: View, names: dict[int, str] | None = None) -> LinkFinding:
    """The stuck link(s) of this hang; empty when it is not an all-wait hang or
    no rank sent link data. ``names``: node rank -> its name in lines."""
    if not all_wait_same(findings):
        return LinkFinding()
    per_rank, nodes, node_ranks = {}, {}, {}
    for rank in findings.hung_ranks:
        entry = view.ranks.get(rank)
        if entry is None or not entry.progress.links:
            continue
        per_rank[rank] = [wire.entry_of(m) for m in entry.progress.links]
        node_ranks[rank] = entry.node_rank
        nodes[rank] = (names or {}).get(entry.node_rank, f"node{entry.node_rank}")
    if not per_rank:
        return LinkFinding()
    return analysis.analyse(per_rank, nodes, node_ranks)


class FrozenLinkRule(Rule):
    """The ``frozen_link`` verdict: every member waits at one seq and one
    link's NCCL proxy steps froze while every other channel advanced (the
    link plugin's counters, docs/link.md)."""

    name = "frozen_link"
    evidence = "every member at one seq; one link's NCCL proxy steps frozen while every other channel advanced"
    wait = "proof_s"
    decides = True

    def judge(self, case: Case) -> Findings:
        # only a link whose neighbours moved on: where every channel waits, nothing is proven
        frozen = [link for link in stuck_links(case.findings, case.view).links if link.others_advanced]
        if not frozen:
            return case.findings
        link = frozen[0]
        return self.decided(case.findings, f"link rank {link.src_rank} -> rank {link.dst_rank} stuck at step "
                                           f"{link.step} while every other channel advanced")
