import pytest

from diag.netcheck.api import FAIL, PASS, RULE_ABSOLUTE, RULE_MAD, RULE_RATIO, NetcheckError
from diag.netcheck.rules import Thresholds, fleet_median, judge, load_profiles, select_profile


def test_upper_median_picks_the_fast_pair_of_two():
    assert fleet_median([1.0, 10.0]) == 10.0
    assert fleet_median([3.0, 1.0, 2.0]) == 2.0


def test_absolute_rule_fires_first_and_says_so():
    v = judge(1.0, [1.0, 10.0], Thresholds(minimum=5.0), "busbw", "GB/s")
    assert (v.verdict, v.rule, v.threshold) == (FAIL, RULE_ABSOLUTE, 5.0)
    assert "floor 5" in v.reason


def test_ratio_rule_against_fleet_median():
    v = judge(2.0, [2.0, 10.0, 11.0], Thresholds(), "busbw", "GB/s")
    assert (v.verdict, v.rule) == (FAIL, RULE_RATIO)
    assert v.threshold == pytest.approx(5.0) and v.expected == 10.0
    assert judge(6.0, [6.0, 10.0, 11.0], Thresholds(), "busbw", "GB/s").verdict == PASS


def test_mad_rule_needs_five_samples_and_a_real_drop():
    fleet = [100.0, 101.0, 99.0, 100.5, 99.5, 70.0]
    v = judge(70.0, fleet, Thresholds(), "busbw", "GB/s")
    assert (v.verdict, v.rule) == (FAIL, RULE_MAD)
    # 3% slower in a tight fleet is not a fault
    assert judge(97.0, [100.0, 100.1, 99.9, 100.2, 97.0], Thresholds(), "busbw", "GB/s").verdict == PASS
    # too few samples for MAD: 70 vs 100 passes the ratio rule
    assert judge(70.0, [100.0, 70.0, 101.0], Thresholds(), "busbw", "GB/s").verdict == PASS


def test_single_figure_without_floor_passes():
    assert judge(1.0, [1.0], Thresholds(), "busbw", "GB/s").verdict == PASS


def test_profiles_ship_h100_and_h200():
    profiles = load_profiles()
    for sku in ("H100", "H200"):
        p = profiles[sku]
        assert p["min_busbw_gbs"]["cross_host"] > 0 and p["min_gemm_tflops"] > 0
    assert select_profile("auto", "NVIDIA H200")["match"] == ["H200"]
    assert select_profile("auto", "cpu") is None
    assert select_profile("h100", None)["match"] == ["H100"]
    with pytest.raises(NetcheckError, match="^--profile: unknown SKU 'B300'"):
        select_profile("B300", None)
