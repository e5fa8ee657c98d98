"""The hang rules in the order they run, and ``decide``: the verdict on one view.

Two kinds of rule, one type (api.Rule). The rules that find run first and
add to one :class:`Findings`: the silent rule (the stalled rule skips
silent agents' ranks), then the stalled rule, which alone says whether an
op hangs; the rules that explain a hang (``Rule.explains``) run only when
one does. The verdict rules (``Rule.decides``) then say whether the hang is
a verdict yet: each proves it from the findings once the hung op has waited
its wait, long before --hang-timeout; ``timeout`` is the bound for the rest.
The idle rule judges the job as a whole and runs apart (idle.py).
"""

from __future__ import annotations

import dataclasses

from diag.hang.api import Case, Findings, Limits, Rule, View
from diag.hang.blocked import BlockedRule
from diag.hang.deadlock import DeadlockedRule, DeadlockRule
from diag.hang.divergence import DivergedRule, DivergenceRule
from diag.hang.gpu import GpuFaultRule
from diag.hang.kernel import StuckKernelRule
from diag.hang.links import FrozenLinkRule
from diag.hang.never_entered import NeverEnteredRule
from diag.hang.not_in_collective import ExitedRule, NotInCollectiveRule
from diag.hang.silent import SilentRule
from diag.hang.stalled import StalledRule, TimeoutRule

# The divergence rule fills Case.members, which never_entered and deadlock
# read; deadlock corrects never_entered's list where the waits close on
# themselves; the not-in-collective rule reads what they found.
RULES: tuple[Rule, ...] = (SilentRule(), StalledRule(), DivergenceRule(), NeverEnteredRule(), DeadlockRule(),
                           NotInCollectiveRule())
# Those that find come first (a hang's explanation reads what they found).
FINDING = tuple(r for r in RULES if not r.explains)
EXPLAINING = RULES[len(FINDING):]
assert all(r.explains for r in EXPLAINING), "the rules that find run before those that explain"
# Tried in this order; the first whose proof holds decides.
PROOFS: tuple[Rule, ...] = (DivergedRule(), DeadlockedRule(), ExitedRule(), FrozenLinkRule(), GpuFaultRule(),
                            BlockedRule(), StuckKernelRule())
TIMEOUT = TimeoutRule()
# what a HANG line's "rule" clause may name
VERDICT_RULES = (TIMEOUT.name,) + tuple(r.name for r in PROOFS)


def analyse(view: View, limits: Limits, explain: bool = True, rules: tuple[Rule, ...] = RULES) -> Findings:
    """What ``rules`` find in ``view``, an op hung past ``limits.hang_timeout_s``;
    no verdict. Cheap when nothing hangs: one pass. ``explain=False`` skips
    the divergence rule (its fingerprint comparison costs ~0.7 s at 16,384
    ranks), for a look that needs only whether the job is still stuck."""
    case = Case(view, limits, Findings(world_size=view.world_size))
    _judge(case, rules, explain)
    return case.findings


def _judge(case: Case, rules: tuple[Rule, ...], explain: bool = True) -> None:
    """``rules`` in order on ``case``, each on what the earlier ones found."""
    for rule in rules:
        if rule.explains and not case.findings.hung:
            continue
        if not explain and isinstance(rule, DivergenceRule):
            continue
        case.findings = rule.judge(case)


def decide(view: View, limits: Limits) -> Findings:
    """The verdict on ``view``: its findings, hung only where a verdict is
    due, ``verdict`` the rule that made it (first in ``fired``). A verdict
    rule decides before the timeout where its proof held its wait (only
    while ``limits.proofs``): the rules then find with the shortest of those
    waits as their timeout, so the explanation (who is behind, where the
    seqs diverge) is there for the proof. Else ``timeout`` decides, past
    ``limits.hang_timeout_s``."""
    looked = None
    if limits.proofs and limits.probe_s < limits.hang_timeout_s:
        # The rules that find first: where an op has waited past the timeout
        # the probe's findings are not read, and explaining them (O(world):
        # 1 s of a declaring tick at 200,000 ranks) would be for nothing.
        looked = Case(view, dataclasses.replace(limits, hang_timeout_s=limits.probe_s),
                      Findings(world_size=view.world_size))
        _judge(looked, FINDING)
        if looked.findings.hung and looked.findings.waited_s < limits.hang_timeout_s:
            _judge(looked, EXPLAINING)
            probe = looked.findings
            case = Case(view, limits, probe)
            for rule in PROOFS:
                if probe.waited_s >= rule.wait_s(limits):
                    found = rule.judge(case)
                    if found is not probe:
                        return found
    # As analyse(view, limits), the stalled rule filtering what the probe found
    case = Case(view, limits, Findings(world_size=view.world_size), aged=looked.aged if looked else None)
    _judge(case, RULES)
    return TIMEOUT.judge(Case(view, limits, case.findings))
