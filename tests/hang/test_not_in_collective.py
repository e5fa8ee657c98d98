"""The not-in-collective rule (diag/hang/not_in_collective.py): who is not waiting with the others."""

import dataclasses

from diag.hang.api import Findings, HungGroup, NeverEntered, OpKey, SilentAgent
from diag.hang.not_in_collective import EXITED, NOT_IN_ANY, NotInCollectiveRule
from tests.hang.views import AR, case, progress, view

OP = OpKey("all_reduce", AR["kind"], 0, 5)


def test_the_others_are_explained_in_rank_order():
    ranks = {0: progress(0, op=AR, age_s=12.0, seq=5), 1: progress(1, idle_s=3.0, last_op="barrier"),
             2: progress(2, alive=False), 3: progress(3, op=AR, age_s=1.0, seq=4), 4: progress(4)}
    never = (NeverEntered(3, OP, 4),)
    findings = Findings(world_size=7, hung=(HungGroup(OP, (0,), 12.0),), never_entered=never,
                        silent_agents=(SilentAgent(1, "n1", (4,), 8.0),))
    found = NotInCollectiveRule().judge(case(view(ranks, world=7), findings=findings))
    assert [(s.rank, s.reason) for s in found.suspects] == [
        (1, NOT_IN_ANY), (2, EXITED), (3, "never entered all_reduce (group 0, seq 5)"),
        (4, "agent on node 1 silent for 8.0 s")]
    assert found.suspects[0].last_op == "barrier" and found.suspects[0].idle_s == 3.0
    assert found.missing_ranks == (5, 6) and found.culprits == [1, 2, 3, 4, 5, 6]
    assert found.fired[-1] == ("not_in_collective", "4 rank(s) not waiting with the others")


def test_a_group_label_names_the_group_in_the_reason():
    from diag.hang.api import GroupLabel
    ranks = {0: progress(0, op=AR, age_s=12.0, seq=5), 1: progress(1, op=AR, age_s=1.0, seq=4)}
    findings = Findings(world_size=2, hung=(HungGroup(OP, (0,), 12.0),), never_entered=(NeverEntered(1, OP, 4),),
                        groups=(GroupLabel(0, "default", "0-1"),))
    found = NotInCollectiveRule().judge(case(view(ranks), findings=dataclasses.replace(findings)))
    assert [s.reason for s in found.suspects] == ['never entered all_reduce (group "default", seq 5)']
