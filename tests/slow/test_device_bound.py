"""The slow-GPU rule judges only device-bound GEMMs (issue 32).

A healthy Megatron-Core job of hidden 256 on H100s (about 50 MFLOP a GEMM,
~1 TFLOP/s) got "SLOW: rank 3 ... GEMM 0.979 TFLOP/s vs job median 1.08 (-9%)
over 2 s": each device-timed interval was mostly the GPU waiting for the
host's launch, so one rank's host noise read as a slow card. The ranks here go
the way the collector's do: the hook's GEMM records into the agent's
PerfWindow, its PerfRank through diag.slow.windows, the detector on a fake
clock.
"""

import random

import pytest

from diag.perf.window import PerfWindow
from diag.records import format as fmt
from diag.slow import windows
from diag.slow.api import RULE_SLOW_GPU, Thresholds
from diag.slow.detector import SlowDetector

WINDOW_S = 2.0          # --perf-window 2s, as in the report
MS = 1_000_000


def rank_window(rank, flops, gemm_us, slower=1.0, steps=40, gemms_per_step=150, step_ms=48, seed=0):
    """One rank's RankWindow: ``steps`` steps of ``gemms_per_step`` hook-timed
    GEMMs of ``flops`` each, timed ``gemm_us`` x ``slower`` with +-20 % jitter."""
    rnd = random.Random(seed * 100 + rank)
    now = [10**12]
    window = PerfWindow(window_s=WINDOW_S, clock=lambda: now[0])
    start = now[0]
    records = []
    for i in range(steps):
        for j in range(gemms_per_step):
            dur = int(gemm_us * slower * rnd.uniform(0.8, 1.2) * 1000)
            end = start + i * step_ms * MS + (j + 1) * step_ms * MS // (gemms_per_step + 1)
            records.append(fmt.Record(fmt.EVENT_END, fmt.KIND_GEMM, 0, 0, 1, 0, 0, end, dur, 0, int(flops), 1, 0,
                                      "cublasGemmEx"))
    window.observe(rank, fmt.PRODUCER_HOOK, records[:1])
    now[0] = start + steps * step_ms * MS
    window.observe(rank, fmt.PRODUCER_HOOK, records[1:])
    return windows.from_perf(rank, 0, rank, "h", window.message(rank))


def verdicts(ranks):
    """SLOW events over one and a half windows of evaluations, every 0.25 s."""
    detector = SlowDetector(Thresholds(window_s=WINDOW_S))
    events = []
    for tick in range(7):
        events += detector.update(tick * WINDOW_S / 4, ranks)
    return events


@pytest.mark.parametrize("host_noise", [1.12, 1.25, 1.4])
def test_tiny_gemms_slower_on_one_rank_from_host_noise_are_no_slow_gpu(host_noise):
    # 50 MFLOP GEMMs timed ~50 us (1 TFLOP/s): rank 3's host is busier, so
    # its launches, and with them its timed GEMMs, take 12-40 % longer.
    ranks = {r: rank_window(r, 50e6, 50.0, host_noise if r == 3 else 1.0) for r in range(4)}
    assert ranks[3].gemm_tflops < ranks[0].gemm_tflops / 1.1   # the figures do differ
    assert verdicts(ranks) == []


def test_a_slow_card_on_big_gemms_is_still_named():
    # GPT-2-sized GEMMs (40 GFLOP, 200 us) with rank 3's taking 15 % longer
    ranks = {r: rank_window(r, 40e9, 200.0, 1.15 if r == 3 else 1.0) for r in range(4)}
    [event] = verdicts(ranks)
    assert (event.finding.rule, event.finding.ranks) == (RULE_SLOW_GPU, (3,))
    assert -0.17 < event.finding.deviation < -0.10
