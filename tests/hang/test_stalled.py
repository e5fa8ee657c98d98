"""The stalled rule (diag/hang/stalled.py): ops in flight past the wait."""

import dataclasses

from diag.hang.api import OpKey, SilentAgent
from diag.hang.stalled import StalledRule
from tests.hang.views import AR, NOW, Entry, case, progress, view


def test_ranks_in_one_op_past_the_timeout_are_one_hung_group_aged_from_the_report():
    ranks = {r: progress(r, op=AR, age_s=9.0, seq=7) for r in range(3)}
    ranks[3] = progress(3, op=AR, age_s=1.0, seq=8)
    v = view(ranks)
    v.ranks[1] = Entry(ranks[1], NOW - 2.0)      # reported 2 s ago at 9 s: 11 s now
    found = StalledRule().judge(case(v, timeout=10.0))
    assert [(g.op, g.ranks, round(g.max_age_s, 3)) for g in found.hung] == [
        (OpKey("all_reduce", AR["kind"], 0, 7), (1,), 11.0)]
    assert found.rule == "stalled"


def test_exited_ranks_and_silent_agents_ranks_are_not_judged():
    ranks = {0: progress(0, op=AR, age_s=30.0, alive=False), 1: progress(1, op=AR, age_s=30.0)}
    c = case(view(ranks, nodes={0: 0, 1: 1}), timeout=10.0)
    c.findings = dataclasses.replace(c.findings, silent_agents=(SilentAgent(1, "n1", (1,), 9.0),))
    assert StalledRule().judge(c).hung == ()


def test_the_wait_is_the_hang_timeout():
    ranks = {0: progress(0, op=AR, age_s=299.0)}
    assert not StalledRule().judge(case(view(ranks), timeout=300.0)).hung
    assert StalledRule().judge(case(view(ranks, now=NOW), timeout=298.0)).hung
