"""The stuck_kernel verdict rule (diag/hang/kernel.py), fed plain named tuples."""

import dataclasses

from diag.hang import decide
from diag.hang.api import Case, Limits
from diag.hang.kernel import STUCK_KERNEL, StuckKernelRule
from diag.pb import collector_pb2 as pb
from tests.hang.views import AR, NOW, Entry, progress, view

S = 1_000_000_000


def kernel(age_s=25.0, runs=19, max_s=0.0012, since=0, quiet_s=None, name="spin_kernel"):
    return pb.KernelProbe(name=name, age_ns=int(age_s * S), history_runs=runs, history_max_ns=int(max_s * S),
                          launches_since=since, quiet_ns=int((age_s if quiet_s is None else quiet_s) * S))


def job(probe=None, *, waited_s=25.0, culprit_op=None):
    """Rank 0 waits in an all-reduce at seq 20; rank 1 is at seq 19 with ``probe``."""
    r0 = progress(0, op=AR, age_s=waited_s, seq=20, started=20, completed=19, world=2)
    r1 = progress(1, op=culprit_op, age_s=waited_s, seq=19, started=19, world=2)
    if probe is not None:
        r1.unfinished_kernel.CopyFrom(probe)
    return view({0: r0, 1: r1})


def verdict(v, timeout=300.0):
    return decide.decide(v, Limits(timeout, 60.0))


def test_a_kernel_far_past_its_history_with_nothing_launched_since_is_named():
    found = verdict(job(kernel()))
    assert found.rule == STUCK_KERNEL and found.culprits == [1]
    assert found.fired[0].evidence == ("rank 1's kernel spin_kernel launched 25 s ago has not ended "
                                       "(its earlier runs took at most 1.2 ms); it launched nothing since")


def test_launches_after_it_count_once_the_rank_stopped_launching():
    found = verdict(job(kernel(since=4, quiet_s=24.6)))
    assert found.rule == STUCK_KERNEL
    assert found.fired[0].evidence.endswith("it launched 4 kernel(s) after it, none for 25 s")


def test_the_kernels_age_is_counted_from_the_report():
    v = job(kernel(age_s=18.0))
    assert verdict(v).rule is None
    late = dataclasses.replace(v, now=NOW + 3.0) if dataclasses.is_dataclass(v) else v._replace(now=NOW + 3.0)
    assert verdict(late).rule == STUCK_KERNEL


def test_healthy_runs_stay_quiet_until_the_timeout():
    quiet = {
        "a first run, no history": kernel(runs=0, max_s=0.0),
        "too few earlier runs": kernel(runs=2),
        "a 20 s GEMM with a history of long runs": kernel(age_s=25.0, max_s=20.0),
        "under the least age": kernel(age_s=15.0),
        "the rank still launches": kernel(since=900, quiet_s=0.5),
        "no probe at all": None,
    }
    for why, probe in quiet.items():
        found = verdict(job(probe))
        assert found.rule is None and not found.hung, why
        assert verdict(job(probe, waited_s=301.0)).rule == "timeout", why


def test_only_a_rank_the_others_wait_for_and_in_no_op():
    # in a collective itself: the other rules judge it (a rank waiting on NCCL's stream)
    assert verdict(job(kernel(), culprit_op=dict(name="all_reduce", kind=pb.OP_KIND_COLLECTIVE))).rule \
        != STUCK_KERNEL
    # the waiting rank's own stuck probe proves nothing: it is not waited for
    v = job(None)
    v.ranks[0].progress.unfinished_kernel.CopyFrom(kernel())
    assert verdict(v).rule is None
    # an exited rank is the exited rule's
    v = job(kernel())
    v.ranks[1].progress.alive = False
    assert verdict(v).rule != STUCK_KERNEL


def test_the_rule_is_a_verdict_rule():
    assert STUCK_KERNEL in decide.VERDICT_RULES
    assert any(isinstance(p, StuckKernelRule) for p in decide.PROOFS)
    probe = decide.analyse(job(kernel()), Limits(5.0, 60.0))
    assert StuckKernelRule().judge(Case(job(kernel()), Limits(300.0, 60.0), probe)).verdict is not None
    assert Entry   # the views module's plain tuples feed it
