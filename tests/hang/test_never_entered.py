"""The never-entered rule (diag/hang/never_entered.py): members behind a hung collective's seq."""

import dataclasses

from diag.hang.api import Findings, HungGroup, OpKey, SilentAgent
from diag.hang.never_entered import NeverEnteredRule
from tests.hang.views import AR, case, progress, view

OP = OpKey("all_reduce", AR["kind"], 0, 5)


def hung_case(ranks, *, silent=()):
    v = view(ranks)
    hung = (HungGroup(OP, tuple(r for r, p in ranks.items() if p.HasField("oldest_in_flight")), 12.0),)
    return case(v, findings=Findings(world_size=len(ranks), hung=hung, silent_agents=silent))


def test_a_member_that_never_started_the_hung_seq_is_named():
    ranks = {r: progress(r, op=AR, age_s=12.0, seq=5, started=5, completed=4) for r in range(3)}
    ranks[3] = progress(3, started=4)
    found = NeverEnteredRule().judge(hung_case(ranks))
    assert [(n.rank, n.op, n.last_started_seq) for n in found.never_entered] == [(3, OP, 4)]
    assert found.fired[-1].rule == "never_entered"


def test_silent_ranks_are_not_named():
    ranks = {r: progress(r, op=AR, age_s=12.0, seq=5, started=5, completed=4) for r in range(3)}
    ranks[3] = progress(3, started=4)
    found = NeverEnteredRule().judge(hung_case(ranks, silent=(SilentAgent(0, "n0", (3,), 9.0),)))
    assert found.never_entered == () and found.fired == ()


def test_a_rank_in_another_groups_op_since_before_the_hung_one_waited_first():
    ranks = {r: progress(r, op=AR, age_s=12.0, seq=5, started=5, completed=4) for r in range(3)}
    ranks[3] = progress(3, op=dict(AR), comm_id=9, age_s=30.0, seq=2, started=4)   # in group 9's op for 30 s
    c = hung_case(ranks)
    c.findings = dataclasses.replace(c.findings, hung=c.findings.hung + (
        HungGroup(OpKey("all_reduce", AR["kind"], 9, 2), (3,), 30.0),))
    assert NeverEnteredRule().judge(c).never_entered == ()
