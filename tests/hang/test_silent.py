"""The silent rule (diag/hang/silent.py) on plain data."""

from diag.hang.silent import SilentRule
from tests.hang.views import NOW, case, progress, view


def test_an_agent_quiet_past_silent_after_with_a_live_rank_is_silent():
    ranks = {0: progress(0), 1: progress(1), 2: progress(2)}
    v = view(ranks, nodes={0: 0, 1: 1, 2: 2}, seen={1: NOW - 7.5, 2: NOW - 4.0})
    found = SilentRule().judge(case(v, silent_after=5.0))
    assert [(a.node_rank, a.ranks, a.silent_for_s) for a in found.silent_agents] == [(1, (1,), 7.5)]
    assert found.rule == "silent" and "node 1" in found.fired[0].evidence


def test_an_agent_whose_ranks_all_exited_may_go_quiet():
    v = view({0: progress(0, alive=False), 1: progress(1)}, nodes={0: 0, 1: 1}, seen={0: NOW - 60.0})
    c = case(v, silent_after=5.0)
    assert SilentRule().judge(c) is c.findings
