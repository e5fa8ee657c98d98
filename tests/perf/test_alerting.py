"""Alerts and the dashboard, with real parts: a 3-rank job under
xpu_timer_launch whose rank 2 is first a straggler (a SLOW episode) and then
stalls (a HANG); a real Prometheus (Debian package) scrapes node 0's agent and
the collector's --collector-metrics-port, loads docs/prometheus/alerts.yml,
and answers every query of docs/grafana/xpu-diag.json. The subject is what
the agent and the collector export and what the rules make of it, not torch:
the ranks are torch-free (scripts/torchless.py: a gloo rank's all_reduces and
optimizer steps through the same tracer and writer; they start in a second
where three torch ranks took 5 to 9 on two cores). The rules' own unit tests
run under the real ``promtool test rules``."""

import json
import os
import runpy
import shutil
import subprocess
import urllib.parse
import urllib.request

import pytest

from diag.common.net import free_port
from tests.functional.launch import ROOT, SCRIPTS, Launch
from tests.waiting import wait_for

SCRIPT = os.path.join(SCRIPTS, "torchless_slow_then_stall.py")
ALERTS = os.path.join(ROOT, "docs", "prometheus", "alerts.yml")
DASHBOARD = os.path.join(ROOT, "docs", "grafana", "xpu-diag.json")
BUILDER = os.path.join(ROOT, "docs", "grafana", "dashboard.py")
JOB = "alertjob"


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def _exe(name):
    exe = shutil.which(name)
    if exe is None:
        pytest.skip(f"{name} is not installed (make system-deps: Debian package prometheus)")
    return exe


def test_alert_rules_pass_promtool():
    promtool = _exe("promtool")
    for cmd in (["check", "rules", ALERTS], ["test", "rules", os.path.join(ROOT, "tests/perf/prometheus/alerts.test.yml")]):
        out = subprocess.run([promtool, *cmd], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr


def test_the_committed_dashboard_is_the_builders_output():
    pytest.importorskip("grafanalib", reason="pip install -e .[test] (grafanalib builds the dashboard)")
    with open(DASHBOARD) as f:
        assert f.read() == runpy.run_path(BUILDER)["render"](), \
            "docs/grafana/xpu-diag.json is stale: python docs/grafana/dashboard.py docs/grafana/xpu-diag.json"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    exe = _exe("prometheus")
    tmp = tmp_path_factory.mktemp("alerting")
    agent_port, collector_port, prom_port = free_port(), free_port(), free_port()
    flag = tmp / "stall"
    # A 4 s --perf-window (was 6 s): the SLOW line comes about 1.5 windows in
    # (judged once every rank fills 0.9 of one, declared after half a window),
    # and the straggler's 40 ms a step is as plain in 4 s of steps as in 6.
    launch = Launch(["--nproc-per-node", "3", "--rdzv-id", JOB, "--timeline-path", str(tmp), "--no-hook",
                     "--metrics-port", str(agent_port), "--collector-metrics-port", str(collector_port),
                     "--metrics-addr", "127.0.0.1", "--perf-window", "4s", "--hang-timeout", "3s",
                     SCRIPT, str(flag), "2", "40"])
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{ALERTS}']\n"
        "scrape_configs:\n"
        "  - job_name: xpu-diag\n"
        "    honor_labels: true\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{agent_port}', '127.0.0.1:{collector_port}']}}]\n")
    prom = subprocess.Popen([exe, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield {"launch": launch, "flag": flag, "prom": f"http://127.0.0.1:{prom_port}",
               "collector": f"http://127.0.0.1:{collector_port}/metrics"}
    finally:
        launch.kill()
        prom.terminate()
        prom.wait(10)


def _query(base: str, promql: str) -> list:
    body = json.loads(_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    assert body["status"] == "success", (promql, body)
    return body["data"]["result"]


def _value(stack, promql):
    try:
        result = _query(stack["prom"], promql)
    except OSError:
        return None
    return float(result[0]["value"][1]) if result else None


def _alerts_list(stack) -> list:
    return json.loads(_get(f"{stack['prom']}/api/v1/alerts"))["data"]["alerts"]


def _alerts(stack) -> dict:
    body = json.loads(_get(f"{stack['prom']}/api/v1/alerts"))
    return {a["labels"]["alertname"]: a for a in body["data"]["alerts"]}


def _dashboard_queries(stack) -> dict:
    pytest.importorskip("grafanalib", reason="pip install -e .[test] (grafanalib builds the dashboard)")
    out = {}
    for expr in runpy.run_path(BUILDER)["queries"]():
        promql = expr.replace("$job", JOB).replace("$__rate_interval", "5s")
        out[expr] = _query(stack["prom"], promql)
    return out


@pytest.mark.alone   # the straggler is judged from real ranks' wait shares
def test_slow_then_hang_reach_the_collectors_metrics_and_the_alerts(stack):
    launch = stack["launch"]
    # Before any verdict: the series are there, at 0 (an alert on them can tell "none" from "no data").
    assert wait_for(lambda: _value(stack, f'xpu_diag_hang_active{{job="{JOB}"}}') == 0,
                    "xpu_diag_hang_active 0 in Prometheus", timeout=60)
    assert launch.wait_line(r"SLOW: rank 2 .*straggler", 90), launch.output()
    open_slow = wait_for(lambda: _value(stack, f'xpu_diag_slow_episodes_open{{job="{JOB}",rule="straggler",rank="2"}}'),
                         "the open SLOW episode in Prometheus", timeout=30)
    assert open_slow == 1
    assert wait_for(lambda: _alerts(stack).get("XpuDiagSlowRank"), "XpuDiagSlowRank pending", timeout=30)["state"] == "pending"
    # While it is open, every dashboard query answers; those of this job's data with series.
    answers = _dashboard_queries(stack)
    empty = sorted(q for q, r in answers.items() if not r)
    # A CPU job: no GEMM rate (no 0.0 series) and no GPUs; nothing is hung yet
    # (an op in flight is caught or not, and a young one).
    assert all("gemm_flops_per_second" in q or "gpu_clocks" in q or "in_flight" in q for q in empty), empty
    assert len([q for q in empty if "in_flight" not in q]) == 2, empty
    assert "XpuDiagRankStuck" not in _alerts(stack)
    ages = _query(stack["prom"], f'max_over_time(xpu_diag_op_in_flight_seconds{{job="{JOB}"}}[1m])')
    assert all(float(r["value"][1]) < 1 for r in ages), ages
    stack["flag"].write_text("")
    assert launch.wait_line(r"HANG", 60), launch.output()
    assert wait_for(lambda: _value(stack, f'xpu_diag_hang_active{{job="{JOB}"}}') == 1,
                    "xpu_diag_hang_active 1 in Prometheus", timeout=30)
    assert _value(stack, f'xpu_diag_hangs_total{{job="{JOB}"}}') == 1
    alert = wait_for(lambda: (a := _alerts(stack).get("XpuDiagHang")) and a["state"] == "firing" and a,
                     "XpuDiagHang firing", timeout=30)
    assert alert["labels"] == {"alertname": "XpuDiagHang", "job": JOB, "severity": "page"}
    # The ranks in the all-reduce: named with their group, and waiting (before: 0.005).
    stuck = wait_for(lambda: [a for a in _alerts_list(stack) if a["labels"]["alertname"] == "XpuDiagRankStuck"
                              and a["state"] == "firing"] or None, "XpuDiagRankStuck firing", timeout=30)
    assert sorted((a["labels"]["rank"], a["labels"]["op"], a["labels"]["group"]) for a in stuck) == [
        ("0", "all_reduce", "default"), ("1", "all_reduce", "default")], stuck
    assert "on group \"default\"" in stuck[0]["annotations"]["description"], stuck
    waits = {r["metric"]["rank"]: float(r["value"][1])
             for r in _query(stack["prom"], f'xpu_diag_collective_wait_ratio{{job="{JOB}"}}')}
    assert waits["0"] > 0.5 and waits["1"] > 0.5 and waits["2"] < 0.5, waits
    text = _get(stack["collector"])
    assert "# TYPE xpu_diag_hangs_total counter" in text and "# TYPE xpu_diag_hang_active gauge" in text
