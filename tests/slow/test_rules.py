"""The slow-rank rules and their episodes, on synthetic windows with a fake clock."""

import dataclasses
import random

import pytest

from diag.slow import rules
from diag.slow.api import (RULE_SLOW_GPU, RULE_SLOW_LINK, RULE_STRAGGLER, CommWindow, RankWindow,
                           Thresholds)
from diag.slow.detector import SlowDetector

TH = Thresholds(window_s=60.0)


def comm(comm_id=0, typical=0.010, count=600, busbw=None, nbytes=64e6, op="all_reduce", name='"default"'):
    return CommWindow(comm_id, name, op, count, typical * count, typical, busbw, nbytes)


def rank(r, tflops=790.0, comms=None, flops=2 * 4096**3, span=60.0, node=0, gc=0.0, launches=20000.0):
    return RankWindow(r, node, r, "host", span, tflops, 200, flops,
                      tuple(comms if comms is not None else [comm()]), 100, gc, launches)


def healthy(n=8, seed=0, noise=0.03):
    rnd = random.Random(seed)
    return {r: rank(r, tflops=790 * (1 + rnd.uniform(-noise, noise)),
                    comms=[comm(typical=0.010 * (1 + rnd.uniform(-0.3, 0.3)))]) for r in range(n)}


@pytest.mark.parametrize("seed", range(20))
def test_a_healthy_job_gives_nothing(seed):
    assert rules.judge(healthy(seed=seed), TH) == []


def test_a_gemm_ten_percent_slow_is_named_with_the_wait_it_costs():
    w = healthy()
    w[5] = rank(5, tflops=612, comms=[comm(typical=0.0005)])
    w.update({r: rank(r, tflops=790, comms=[comm(typical=0.012)]) for r in range(8) if r != 5})
    [f] = rules.judge(w, TH)
    assert (f.rule, f.ranks) == (RULE_SLOW_GPU, (5,))
    assert f.detail.startswith("GEMM 612 TFLOP/s vs job median 790 (-23%)")
    assert "its peers wait 12% of the time in all_reduce" in f.detail


def test_two_ranks_compare_with_each_other():
    w = {0: rank(0, tflops=790), 1: rank(1, tflops=700)}
    [f] = rules.judge(w, TH)
    assert (f.rule, f.ranks, round(f.deviation, 3)) == (RULE_SLOW_GPU, (1,), round(700 / 790 - 1, 3))


def test_ranks_of_other_roles_are_not_compared():
    # pipeline stages: stage 1's GEMMs are 1000x larger and run faster
    w = {r: rank(r, tflops=300, flops=2e9) for r in range(4)}
    w.update({r: rank(r, tflops=780, flops=2e12) for r in range(4, 8)})
    assert rules.judge(w, TH) == []


def test_straggler_with_healthy_gemms_and_its_reason():
    w = {r: rank(r, comms=[comm(typical=0.004)]) for r in range(4)}
    w[2] = rank(2, comms=[comm(typical=0.0002)], launches=9000)
    assert rules.judge(w, TH) == []   # the peers wait 4 % of the time: under the gap
    w = {r: rank(r, comms=[comm(typical=0.015)]) for r in range(4)}
    w[2] = rank(2, comms=[comm(typical=0.0002)], launches=9000)
    [f] = rules.judge(w, TH)
    assert (f.rule, f.ranks) == (RULE_STRAGGLER, (2,))
    assert "it launches 9000 kernels/s vs 20000 for its peers" in f.detail
    w = {r: rank(r, comms=[comm(typical=0.020)]) for r in range(4)}
    w[2] = rank(2, comms=[comm(typical=0.001)], gc=12.0)
    [f] = rules.judge(w, TH)
    assert (f.rule, f.ranks) == (RULE_STRAGGLER, (2,))
    assert "peers wait 20% of the time in all_reduce" in f.detail
    assert "20% of the time in garbage collection" in f.detail


def test_one_long_wait_is_not_a_straggler():
    # rank 0 writes a 20 s checkpoint; the others wait once, in one all_reduce
    w = {r: rank(r, comms=[CommWindow(0, '"default"', "all_reduce", 600, 0.01 * 600 + 20, 0.01, None, 64e6)])
         for r in range(1, 4)}
    w[0] = rank(0, comms=[comm(typical=0.01)])
    assert rules.judge(w, TH) == []


def test_a_straggler_on_one_group_only_is_not_named():
    w = {r: rank(r, comms=[comm(0, typical=0.02), comm(1, typical=0.02)]) for r in range(4)}
    w[1] = rank(1, comms=[comm(0, typical=0.001), comm(1, typical=0.02)])
    assert rules.find_stragglers(w, TH) == []


def test_a_slow_link_names_its_group():
    groups = {0: (0, 1), 1: (2, 3), 2: (4, 5), 3: (6, 7)}
    w = {}
    for g, members in groups.items():
        for r in members:
            w[r] = rank(r, comms=[comm(g + 10, busbw=(180e9 if g == 2 else 370e9), name=f'"tp{g}"')])
    [f] = rules.judge(w, TH)
    assert (f.rule, f.ranks, f.comm_id) == (RULE_SLOW_LINK, (4, 5), 12)
    assert '"tp2" (ranks 4-5) runs at 180.0 GB/s busbw vs 370.0 GB/s' in f.detail


def windows_at(slow_rank=None, tflops=650):
    w = {r: rank(r) for r in range(8)}
    if slow_rank is not None:
        w[slow_rank] = rank(slow_rank, tflops=tflops)
    return w


def test_detector_waits_half_a_window_then_fires_once():
    d = SlowDetector(TH)
    fired = [(t, e) for t in range(60, 200, 5) for e in d.update(float(t), windows_at(3))]
    assert [(t, e.finding.ranks) for t, e in fired] == [(90, (3,))]


def test_warm_up_windows_are_not_judged():
    d = SlowDetector(TH)
    w = {r: rank(r, span=30.0) for r in range(8)}
    w[3] = rank(3, tflops=400, span=30.0)
    assert [e for t in range(0, 300, 5) for e in d.update(float(t), w)] == []


def test_a_blip_does_not_fire_and_recovery_rearms():
    d = SlowDetector(TH)
    t, events = 0.0, []
    for phase, seconds in ((3, 20), (None, 60), (3, 60), (None, 70), (3, 60)):
        for _ in range(int(seconds / 5)):
            t += 5
            events += d.update(t, windows_at(phase))
    # the first 20 s blip never fired; two episodes follow, split by a recovery
    assert [e.finding.ranks for e in events] == [(3,), (3,)]
    assert events[1].declared - events[0].declared >= 60 + 70


def test_no_recovery_no_second_event():
    d = SlowDetector(TH)
    events = []
    for t in range(0, 400, 5):
        events += d.update(float(t), windows_at(3 if (t // 5) % 2 else 3))
    assert len(events) == 1


def test_bad_threshold_is_one_line():
    with pytest.raises(ValueError, match="slow threshold slow: 10 must be a fraction"):
        Thresholds(slow=10)


def _perf(ops):
    from diag.pb import collector_pb2 as pb
    return pb.PerfRank(window_s=60.0, ops=[pb.PerfOp(**op) for op in ops])


def test_from_perf_keeps_ddp_waits_and_drops_one_checkpoint():
    from diag.records import format as fmt
    from diag.slow import windows
    # DDP: 5 bucket all-reduces a step for 600 steps, 1 in 8 timed; the peers
    # wait 20 ms in the first bucket of each step, and 20 s once (a checkpoint)
    timed = 375
    waiting = dict(name="ncclAllReduce", kind=fmt.KIND_COLLECTIVE, producer=fmt.PRODUCER_HOOK, comm_id=7,
                   comm_size=4, count=3000, timed_count=timed, timed_ns=int(75 * 20e6 + 299 * 1e6 + 20e9),
                   p50_ns=int(1e6), max_ns=int(20e9), bytes=3000 << 20, timed_bytes=timed << 20)
    w = windows.from_perf(1, 0, 1, "h", _perf([waiting]))
    [c] = w.comms
    assert c.count == 3000 and c.op == "ncclAllReduce"
    typical = (75 * 20e-3 + 299 * 1e-3) / 374          # per call, the checkpoint left out
    assert abs(c.typical_s - typical) < 1e-9 and c.typical_s > 3 * 1e-3   # the p50 (1 ms) would hide it
    assert abs(c.wait_s - (75 * 20e-3 + 299 * 1e-3 + 20) / timed * 3000) < 1e-6


def test_a_rank_that_waits_is_never_the_slow_gpu():
    # H200 x2, rank 0 sleeping on the host: rank 1 waits 48 % and its GEMMs,
    # beside spinning NCCL kernels, read 11 % under rank 0's
    w = {0: rank(0, tflops=272.5, comms=[comm(typical=0.0005)]),
         1: rank(1, tflops=241.9, comms=[comm(typical=0.048)])}
    [f] = rules.judge(w, TH)
    assert (f.rule, f.ranks) == (RULE_STRAGGLER, (0,))


def test_extra_gpu_work_is_the_stragglers_clue():
    w = {r: rank(r, comms=[comm(typical=0.02)]) for r in range(2)}
    w[1] = RankWindow(1, 0, 1, "host", 60.0, 790.0, 200, 2 * 4096**3, (comm(typical=0.001),), 100, 0.0,
                      20000.0 * 1.08)
    [f] = rules.judge(w, TH)
    assert (f.rule, f.ranks) == (RULE_STRAGGLER, (1,))
    assert "it launches 12960 kernels a step vs 12000 for its peers (extra GPU work" in f.detail


@pytest.mark.parametrize("n", [2, 3, 4, 7, 10])
def test_medians_without_each_match_the_plain_median(n):
    import statistics
    values = [random.Random(n).uniform(0, 100) for _ in range(n)]
    got = rules.medians_without_each(values)
    assert got == [statistics.median(values[:i] + values[i + 1:]) for i in range(n)]


def _pipeline_rank(ops_per_step, steps=50, step_ms=100):
    """A rank's RankWindow through the agent's window: ``ops_per_step`` are
    (name, start, end) in ms from each step's start, p2p on the default group."""
    from diag.perf.window import PerfWindow
    from diag.records import format as fmt
    from diag.slow import windows
    ms, now = 1_000_000, [10**12]
    window = PerfWindow(window_s=10, clock=lambda: now[0])
    start = now[0]
    end = [fmt.Record(fmt.EVENT_END, fmt.KIND_HOST_FUNC, 0, 0, 1, 0, 0, start, 1, 0, 0, 1, 0, "anchor")]
    for i in range(steps):
        end += [fmt.Record(fmt.EVENT_END, fmt.KIND_P2P, 0, 0, 1, 0, 0, start + (i * step_ms + b) * ms,
                           (b - a) * ms, 4096, 0, 1, 2, name) for name, a, b in ops_per_step]
    window.observe(0, fmt.PRODUCER_PYTHON, end[:1])
    now[0] = start + steps * step_ms * ms
    window.observe(0, fmt.PRODUCER_PYTHON, end[1:])
    return windows.from_perf(0, 0, 0, "h", window.message(0))


def test_overlapping_p2p_is_not_read_as_more_wait():
    # Issue 18: both stages of a pipeline have 50 ms of each 100 ms step with
    # a p2p op in flight; rank 0's two microbatches' ops are in flight at once
    # (their summed time 90 ms), rank 1's one after the other.
    overlapped = _pipeline_rank([("isend", 0, 50), ("irecv", 10, 50)])
    serial = _pipeline_rank([("isend", 0, 25), ("irecv", 25, 50)])
    th = Thresholds(window_s=5.0)
    assert [round(c.wait_s, 3) for w in (overlapped, serial) for c in w.comms] == [2.5, 2.5]
    w = {0: dataclasses.replace(overlapped, rank=0), 1: dataclasses.replace(serial, rank=1)}
    assert rules.judge(w, th) == []
    # a real straggler beside overlapping p2p is still named
    w[1] = dataclasses.replace(_pipeline_rank([("isend", 0, 5), ("irecv", 5, 10)]), rank=1)
    [f] = rules.judge(w, th)
    assert (f.rule, f.ranks) == (RULE_STRAGGLER, (1,))


def test_from_perf_scales_the_union_like_the_typical_wait():
    from diag.pb import collector_pb2 as pb
    from diag.records import format as fmt
    from diag.slow import windows
    # 100 calls of 10 ms and one of 5 s (a checkpoint); half the time overlapped
    op = dict(name="all_reduce", kind=fmt.KIND_COLLECTIVE, producer=fmt.PRODUCER_PYTHON, comm_size=2, count=101,
              timed_count=101, timed_ns=int(6e9), max_ns=int(5e9), bytes=101 << 20, timed_bytes=101 << 20)
    busy = [pb.PerfCommBusy(producer=fmt.PRODUCER_PYTHON, all_comms=True, busy_ns=int(3e9)),
            pb.PerfCommBusy(producer=fmt.PRODUCER_PYTHON, busy_ns=int(3e9))]
    [c] = windows.from_perf(0, 0, 0, "h", pb.PerfRank(window_s=60.0, ops=[pb.PerfOp(**op)], comm_busy=busy)).comms
    assert abs(c.wait_s - 3.0) < 1e-9
    assert abs(c.typical_s * c.count - 1.0 * 101 / 100 * 0.5) < 1e-9   # the 5 s call left out, then halved
