"""The hang rules in the order they run, and ``analyse``: one evaluation.

Each rule adds to the :class:`Findings` the earlier ones made: the silent
rule first (the stalled rule skips silent agents' ranks), then the stalled
rule, which alone decides whether the job hangs; the rules that explain a
hang (``Rule.explains``) run only when it does. The idle rule judges the
job as a whole and runs apart (idle.py).
"""

from __future__ import annotations

from diag.hang.api import Case, Findings, Limits, Rule, View
from diag.hang.deadlock import DeadlockRule
from diag.hang.divergence import DivergenceRule
from diag.hang.never_entered import NeverEnteredRule
from diag.hang.not_in_collective import NotInCollectiveRule
from diag.hang.silent import SilentRule
from diag.hang.stalled import StalledRule

# The divergence rule fills Case.members, which never_entered and deadlock
# read; deadlock corrects never_entered's list where the waits close on
# themselves; the not-in-collective rule reads what they found.
RULES: tuple[Rule, ...] = (SilentRule(), StalledRule(), DivergenceRule(), NeverEnteredRule(), DeadlockRule(),
                           NotInCollectiveRule())


def analyse(view: View, timeout_s: float, silent_after_s: float, explain: bool = True,
            rules: tuple[Rule, ...] = RULES) -> Findings:
    """Apply ``rules`` to ``view``. Cheap when nothing hangs: one pass.
    ``explain=False`` skips the divergence rule (its fingerprint comparison
    costs ~0.7 s at 16,384 ranks): for ticks during a hang already declared,
    which need only to see whether it is still stuck."""
    case = Case(view, Limits(timeout_s, silent_after_s), Findings(world_size=view.world_size))
    for rule in rules:
        if rule.explains and not case.findings.hung:
            continue
        if not explain and isinstance(rule, DivergenceRule):
            continue
        case.findings = rule.judge(case)
    return case.findings
