"""The idle rule (diag/hang/idle.py) and its detector (diag/hang/detector.py)."""

from diag.hang.detector import IdleDetector
from diag.hang.idle import IdleRule
from tests.hang.views import AR, NOW, case, progress, view


def test_every_live_rank_idle_past_the_idle_timeout_is_a_stall():
    ranks = {0: progress(0, idle_s=70.0, last_op="barrier"), 1: progress(1, idle_s=65.0),
             2: progress(2, alive=False)}
    found = IdleRule().judge(case(view(ranks, world=4), idle=60.0))
    stall = found.idle
    assert (stall.ranks, stall.idle_s, stall.exited_ranks, stall.missing_ranks) == ((0, 1), 65.0, (2,), (3,))
    assert stall.last_ops == {0: "barrier", 1: "all_reduce"} and found.rule == "idle"


def test_one_rank_in_flight_or_recently_active_is_no_stall():
    for other in (progress(1, op=AR, idle_s=70.0), progress(1, idle_s=30.0)):
        c = case(view({0: progress(0, idle_s=70.0), 1: other}), idle=60.0)
        assert IdleRule().judge(c) is c.findings


def test_the_detector_fires_once_and_rearms_on_activity():
    detector, rule = IdleDetector(), IdleRule()
    idle = view({0: progress(0, idle_s=70.0)})
    assert detector.update(rule.judge(case(idle)).idle, idle)
    assert not detector.update(rule.judge(case(idle)).idle, idle) and not detector.armed
    active = view({0: progress(0, idle_s=0.0)}, now=NOW + 5)
    assert not detector.update(rule.judge(case(active)).idle, active) and detector.armed
