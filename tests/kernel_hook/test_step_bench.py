"""bench/hook_step_overhead.py's statistics and argument checks (its GPU run
is in docs/kernel_hook.md); these need no GPU."""

import dataclasses
import importlib.util
import os
import random
import statistics
import sys

import pytest

from tests.kernel_hook.conftest import ROOT

_spec = importlib.util.spec_from_file_location(
    "hook_step_overhead", os.path.join(ROOT, "bench", "hook_step_overhead.py"))
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # dataclasses look their module up there
_spec.loader.exec_module(bench)


def _rounds(scale: float, seed: int, n_rounds: int = 12, steps: int = 10):
    rng = random.Random(seed)
    # A drift shared by all variants (round r is slow or fast for everyone).
    drift = [1 + 0.04 * rng.random() for _ in range(n_rounds)]
    return [[0.065 * d * scale * (1 + 0.001 * rng.random()) for _ in range(steps)] for d in drift]


def test_paired_overhead_cancels_a_shared_drift():
    base = _rounds(1.0, seed=1)
    rounds = {"off": base,
              "hook": [[t * 1.01 for t in r] for r in base],  # exactly +1 % per step
              "disabled": [list(r) for r in base]}
    s = bench.summarize(rounds)
    assert s["hook"]["paired_pct"] == pytest.approx(1.0, abs=1e-9)
    lo, hi = s["hook"]["paired_ci95"]
    assert lo == pytest.approx(1.0, abs=1e-9) and hi == pytest.approx(1.0, abs=1e-9)
    assert s["hook"]["overhead_pct"] == pytest.approx(1.0, abs=1e-9)
    assert s["disabled"]["paired_pct"] == 0 and s["off"]["p10_pct"] == 0
    assert s["hook"]["min_round_median_pct"] == pytest.approx(1.0, abs=1e-9)
    assert s["hook"]["iqr_ms"] > 0 and len(s["hook"]["round_medians_ms"]) == 12


def test_bootstrap_interval_contains_the_median_of_noisy_ratios():
    rng = random.Random(3)
    xs = [0.3 + rng.gauss(0, 0.5) for _ in range(40)]
    lo, hi = bench.bootstrap_ci(xs)
    med = sorted(xs)[20]
    assert lo < med < hi and hi - lo < 1.0


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--steps", "-1"]])
def test_bad_arguments_are_one_line_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "must be positive" in err[-1] and "Traceback" not in "".join(err)


def test_generations_split_the_rounds_evenly():
    cfg = bench.Config(rounds=10, generations=4)
    assert [cfg.gen_rounds(g) for g in range(4)] == [3, 3, 2, 2]
    with pytest.raises(ValueError, match="--generations 5 exceeds --rounds 4"):
        bench.Config(rounds=4, generations=5)


def test_job_level_offsets_widen_the_interval_and_average_out():
    """Each generation's hook job has a level of its own (+-0.6 %); the nested
    interval must hold the spread between generations, which a bootstrap of
    the pooled rounds would hide."""
    base = _rounds(1.0, seed=5, n_rounds=24)
    offsets = [0.6, -0.6, 0.6, -0.6]
    gens = [i // 6 for i in range(24)]
    hook = [[t * (1.002 + offsets[g] / 100) for t in r] for r, g in zip(base, gens)]
    rounds = {"off": base, "hook": hook, "disabled": [list(r) for r in base]}
    s = bench.summarize(rounds, gens)["hook"]
    assert s["generation_means_pct"] == pytest.approx([0.8, -0.4, 0.8, -0.4], abs=1e-9)
    assert s["paired_mean_pct"] == pytest.approx(0.2, abs=1e-9)
    lo, hi = s["paired_mean_ci95"]
    assert lo < -0.3 and hi > 0.7  # the job spread is in the interval
    flat_lo, flat_hi = bench.bootstrap_ci(
        [100 * (statistics.median(h) / statistics.median(o) - 1) for h, o in zip(hook, base)],
        statistics.fmean)
    assert flat_hi - flat_lo < hi - lo


def test_nested_bootstrap_of_one_group_is_the_plain_bootstrap_of_its_mean():
    rng = random.Random(7)
    xs = [rng.gauss(0.4, 0.3) for _ in range(50)]
    lo, hi = bench.nested_bootstrap_ci([xs])
    assert lo < statistics.fmean(xs) < hi and hi - lo < 0.3


def test_in_process_pairs_add_the_forwarding_cost_to_the_verdict():
    cfg = bench.Config(rounds=4, steps=2, warmup=3, generations=2, pairs=5,
                       forward_ns=(10.0, 100.0))
    assert [cfg.gen_pairs(g) for g in range(2)] == [3, 2]
    # Per generation: warm-up 3 + 2 rounds x 3 steps + its pairs' hooked steps + 1 untimed.
    assert cfg.hooked_steps() == (3 + 6 + 4) + (3 + 6 + 3)
    pairs = [(0.1005, 0.1, 0), (0.1005, 0.1, 0), (0.1005, 0.1, 0), (0.1003, 0.1, 1),
             (0.1003, 0.1, 1)]
    # 800 hooked launches and 20 ops per step on each of 2 ranks.
    calls = (2 * cfg.hooked_steps() * 800, 2 * cfg.hooked_steps() * 20)
    p = bench.summarize_pairs(cfg, pairs, *calls)
    assert p["generation_means_pct"] == pytest.approx([0.5, 0.3])
    assert p["mean_pct"] == pytest.approx(0.4)
    assert (p["launches_per_step"], p["ops_per_step"]) == pytest.approx((800, 20))
    assert p["forward_pct"] == pytest.approx(100 * (800 * 10e-9 + 20 * 100e-9) / 0.1)  # 0.01 %
    assert p["overhead_pct"] == pytest.approx(0.41)
    assert p["upper_pct"] == pytest.approx(p["ci95"][1] + 0.01)
    assert bench.summarize_pairs(dataclasses.replace(cfg, forward_ns=None), pairs,
                                 *calls)["forward_pct"] is None


def test_forward_ns_takes_one_or_two_figures():
    assert bench.parse_args(["--forward-ns", "6.4,136"]).forward_ns == (6.4, 136.0)
    assert bench.parse_args(["--forward-ns", "7"]).forward_ns == (7.0, 7.0)


@pytest.mark.parametrize("argv,msg", [(["--pairs", "-1"], "must not be negative"),
                                      (["--forward-ns", "-2"], "must not be negative"),
                                      (["--forward-ns", "a,b"], "is not LAUNCH[,OP]"),
                                      (["--forward-ns", "1,2,3"], "is not LAUNCH[,OP]")])
def test_bad_pairs_arguments_are_one_line_errors(argv, msg, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert msg in capsys.readouterr().err.strip().splitlines()[-1]
