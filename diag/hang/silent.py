"""The silent rule: an agent with no report for longer than --silent-after.

Its ranks' data is stale, so they are reported as silent, never judged hung
(the stalled rule skips them). An agent whose ranks all exited may go quiet:
the job or the node is done.
"""

from __future__ import annotations

import dataclasses

from diag.hang.api import Case, Finding, Findings, Rule, SilentAgent, View


class SilentRule(Rule):
    name = "silent"
    evidence = "when each agent last reported, and whether any of its ranks is alive"
    wait = "silent_after_s"

    def judge(self, case: Case) -> Findings:
        silent = silent_agents(case.view, self.wait_s(case.limits))
        if not silent:
            return case.findings
        nodes = ",".join(str(a.node_rank) for a in silent[:4]) + (",..." if len(silent) > 4 else "")
        return dataclasses.replace(case.findings, silent_agents=silent, fired=case.findings.fired + (
            Finding(self.name, f"{len(silent)} agent(s) (node {nodes}) silent past {self.wait_s(case.limits):g} s"),))


def silent_agents(view: View, silent_after_s: float) -> tuple[SilentAgent, ...]:
    """The agents quiet for longer than ``silent_after_s`` with a live rank, by node."""
    # The quiet ones first, then sorted: sorting 12,500 agents each tick, as
    # it did, took ~50 ms with the collections its garbage set off, every
    # tick while a declared hang lasts (docs/collector.md "Report relays").
    since = view.now - silent_after_s
    quiet = sorted((node, info) for node, info in view.agents.items() if info.last_seen < since)
    return tuple(SilentAgent(node, info.hostname, info.ranks, view.now - info.last_seen)
                 for node, info in quiet if _any_alive(view, info.ranks, node))


def _any_alive(view: View, ranks, node: int) -> bool:
    for rank in ranks:
        entry = view.ranks.get(rank)
        if entry is not None and entry.node_rank == node and entry.progress.alive:
            return True
    return False
