"""The rule contract (diag/hang/api.py) and the order decide.py runs the rules in."""

import dataclasses

import pytest

from diag.hang import decide
from diag.hang.api import Case, Findings, Limits, Rule
from diag.hang.idle import IdleRule
from tests.hang.views import AR, NOW, case, progress, view

LIMITS = Limits(hang_timeout_s=300.0, silent_after_s=5.0, idle_timeout_s=600.0)


@pytest.mark.parametrize("rule", decide.RULES + decide.PROOFS + (decide.TIMEOUT, IdleRule()), ids=lambda r: r.name)
def test_every_rule_states_its_evidence_and_waits_for_the_limit_it_names(rule):
    assert rule.name and rule.evidence
    assert rule.wait_s(LIMITS) == getattr(LIMITS, rule.wait)
    assert {r.name for r in decide.RULES} == {"silent", "stalled", "divergence", "never_entered", "deadlock",
                                              "not_in_collective"}
    assert rule.decides == (rule in decide.PROOFS or rule is decide.TIMEOUT)


class Proven(Rule):
    name, evidence, wait = "proven", "test", "proof_s"

    def judge(self, case: Case) -> Findings:
        return case.findings


def test_a_proof_waits_its_wait_never_past_the_timeout():
    assert Proven().wait_s(LIMITS) == 5.0
    assert Proven().wait_s(dataclasses.replace(LIMITS, hang_timeout_s=3.0)) == 3.0
    assert decide.RULES[4].wait_s(dataclasses.replace(LIMITS, hang_timeout_s=2.0)) == 2.0   # deadlock's


def test_explaining_rules_run_only_while_an_op_hangs_and_findings_say_which_rule_fired():
    ranks = {0: progress(0, op=AR, age_s=12.0, seq=5, started=5, completed=4), 1: progress(1, started=4)}
    hung = decide.analyse(view(ranks), Limits(10.0, 5.0))
    assert hung.rule == "stalled" and [f.rule for f in hung.fired] == ["stalled", "never_entered",
                                                                      "not_in_collective"]
    assert "1 rank(s) in 1 op(s) in flight past 10 s" in hung.fired[0].evidence
    assert [s.rank for s in hung.suspects] == [1]
    young = decide.analyse(view(ranks), Limits(20.0, 5.0))   # the same view, under a longer timeout
    assert young.rule is None and not young.hung and not young.suspects and not young.fired


def test_without_explain_the_divergence_rule_is_skipped():
    ranks = {0: progress(0, op=AR, age_s=12.0, seq=5, started=5, completed=4),
             1: progress(1, op=AR, age_s=12.0, seq=5, started=5, completed=4)}
    found = decide.analyse(view(ranks), Limits(10.0, 5.0), explain=False)
    assert found.hung and not found.groups and found.rule == "stalled"
    assert decide.analyse(view(ranks), Limits(10.0, 5.0)).groups   # with explain, the groups are labelled


def test_a_case_starts_empty():
    c = case(view({0: progress(0)}, now=NOW))
    assert c.findings == Findings(world_size=1) and c.members == {}
