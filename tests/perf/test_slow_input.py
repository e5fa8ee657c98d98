"""The performance view feeds the slow-rank rules: windows built by the real
PerfWindow from records, turned into RankWindows, judged by diag.slow.rules."""

from diag.pb import collector_pb2 as pb
from diag.perf.slow_input import rank_windows
from diag.perf.window import PerfWindow
from diag.records import format as fmt
from diag.slow import rules
from diag.slow.api import RULE_SLOW_GPU, RULE_STRAGGLER, Thresholds

TH = Thresholds(window_s=60.0)
FLOPS = 2 * 4096 ** 3


def rec(name, kind, dur, t, nbytes=0, flops=0, comm_size=4):
    return fmt.Record(fmt.EVENT_END, kind, 1, 0, 1, 0xABC, 1, t, dur, nbytes, flops, 1, comm_size, name)


def job(gemm_ms: dict, wait_ms: dict, steps=600, step_ms=100):
    """4 ranks x ``steps`` steps: 8 GEMMs and one all-reduce each, as the hook records them."""
    now = [10**12]
    windows = {r: PerfWindow(60.0, clock=lambda: now[0]) for r in range(4)}
    start = now[0]
    for r, window in windows.items():
        window.observe(r, fmt.PRODUCER_HOOK, [rec("ncclAllReduce", fmt.KIND_COLLECTIVE, 1, start)])
    for i in range(steps):
        t = start + (i + 1) * step_ms * 10**6
        now[0] = t
        for r, window in windows.items():
            window.observe(r, fmt.PRODUCER_HOOK, [
                *(rec("cublasGemmEx", fmt.KIND_GEMM, int(gemm_ms.get(r, 1.0) * 1e6), t, flops=FLOPS)
                  for _ in range(8)),
                rec("ncclAllReduce", fmt.KIND_COLLECTIVE, int(wait_ms.get(r, 20.0) * 1e6), t,
                    nbytes=64 << 20)])
    view = pb.PerfView(job_id="j")
    for r, window in windows.items():
        view.ranks.add(rank=r, local_rank=r, node_rank=0, hostname="h", perf=window.message(r))
    return rank_windows(view)


def test_windows_carry_the_views_figures():
    w = job({}, {})[0]
    assert 55 <= w.span_s <= 60 and w.gemm_samples > 4000
    assert abs(w.gemm_tflops - FLOPS / 1e-3 / 1e12) < 1e-6 * w.gemm_tflops
    [c] = w.comms
    assert (c.comm_id, c.op, c.comm_name) == (0xABC, "ncclAllReduce", "0000000000000abc")
    assert abs(c.wait_s / w.span_s - 0.2) < 0.01 and abs(c.p50_s - 0.020) < 0.0025
    assert abs(c.busbw_bps - (64 << 20) / 0.020 * 1.5) < 1e-6 * c.busbw_bps


def test_a_healthy_job_gives_no_finding():
    assert rules.judge(job({}, {}), TH) == []


def test_the_rank_the_others_wait_for_is_the_straggler():
    # rank 2 comes late: it barely waits (1 ms), its peers wait 30 ms per step
    [f] = rules.judge(job({}, {0: 30.0, 1: 30.0, 2: 1.0, 3: 30.0}), TH)
    assert (f.rule, f.ranks) == (RULE_STRAGGLER, (2,))


def test_a_slow_gpu_is_named_from_its_gemm_samples():
    [f, *_] = rules.judge(job({1: 1.2}, {0: 25.0, 1: 2.0, 2: 25.0, 3: 25.0}), TH)
    assert (f.rule, f.ranks) == (RULE_SLOW_GPU, (1,))
