"""What a scrape of the agent's /metrics says, over real HTTP, read by
prometheus_client's parser and linted by the real ``promtool check metrics``:
the op duration is a summary (quantiles, _sum, _count), and a rank with no
device-timed GEMM (a CPU job) has no GEMM-rate series at all."""

import shutil
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from diag.perf import metrics
from diag.perf.window import PerfWindow
from diag.records import format as fmt

START = 10**12


def rec(name, kind, dur, t, nbytes=0, flops=0, producer_comm=5):
    return fmt.Record(fmt.EVENT_END, kind, 0, 0, 1, producer_comm, 1, t, dur, nbytes, flops, 1, 2, name)


def scrape(window: PerfWindow) -> str:
    exporter = metrics.Exporter("job1", "node1")
    assert exporter.start("127.0.0.1", 0) is None
    try:
        exporter.publish([(0, 0, window.message(0))])
        with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=5) as resp:
            return resp.read().decode()
    finally:
        exporter.stop()


def cpu_job() -> PerfWindow:
    clock = [START]
    window = PerfWindow(window_s=10, clock=lambda: clock[0])
    window.observe(0, fmt.PRODUCER_PYTHON, [
        rec("all_reduce", fmt.KIND_COLLECTIVE, 2 * 10**7, START + i * 10**8, nbytes=64) for i in range(1, 6)]
        + [rec("optimizer.step", fmt.KIND_HOST_FUNC, 10**6, START + i * 10**8 + 1) for i in range(1, 6)])
    clock[0] = START + 10**9
    return window


def test_op_duration_is_a_summary_with_sum_and_count():
    text = scrape(cpu_job())
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    fam = fams["xpu_diag_op_duration_seconds"]
    assert fam.type == "summary", text
    ours = [s for s in fam.samples if s.labels.get("op") == "all_reduce"]
    by = {(s.name, s.labels.get("quantile")): s.value for s in ours}
    assert by[("xpu_diag_op_duration_seconds_count", None)] == 5
    assert abs(by[("xpu_diag_op_duration_seconds_sum", None)] - 0.1) < 1e-9
    # p50 within the window's quarter-octave buckets of the 20 ms every call took
    assert 0.0175 <= by[("xpu_diag_op_duration_seconds", "0.5")] <= 0.0225
    assert ("xpu_diag_op_duration_seconds", "0.99") in by
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (make system-deps)")
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_no_gemm_rate_series_without_a_timed_gemm():
    window = cpu_job()
    text = scrape(window)
    assert "\nxpu_diag_gemm_flops_per_second{" not in text, text
    # a hook GEMM with a device time: the series comes, with its rate
    window.observe(0, fmt.PRODUCER_HOOK, [rec("gemm", fmt.KIND_GEMM, 10**6, START + 9 * 10**8, flops=10**9)])
    values = {s.name: s.value for f in text_string_to_metric_families(scrape(window)) for s in f.samples}
    assert values["xpu_diag_gemm_flops_per_second"] == pytest.approx(1e12)
