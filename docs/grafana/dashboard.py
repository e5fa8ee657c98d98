"""The xpu-diag Grafana dashboard, built with grafanalib (a test-time
dependency: pyproject's `test` extra). Regenerate the committed JSON with

    .venv/bin/python docs/grafana/dashboard.py docs/grafana/xpu-diag.json

tests/perf/test_alerting.py checks the committed file is this script's output
and runs every query against a real Prometheus scraping a real job.
Queries read the agents' per-rank series and the collector's verdicts
(docs/metrics.md); $job is the training job's id.
"""

import json
import os
import sys

from grafanalib._gen import DashboardEncoder
from grafanalib.core import (Dashboard, DataSourceInput, GridPos, Stat, Target, Template, Templating,
                             TimeSeries)

DS = "${DS_PROMETHEUS}"
J = 'job="$job"'


def _t(expr: str, legend: str, ref: str = "A") -> Target:
    return Target(expr=expr, legendFormat=legend, refId=ref, datasource=DS)


def _stat(title, expr, legend, x, w=6):
    return Stat(title=title, dataSource=DS, targets=[_t(expr, legend)], gridPos=GridPos(h=4, w=w, x=x, y=0),
                reduceCalc="lastNotNull")


def _series(title, targets, unit, x, y, w=12):
    return TimeSeries(title=title, dataSource=DS, targets=targets, unit=unit, gridPos=GridPos(h=8, w=w, x=x, y=y))


PANELS = [
    # The collector's verdicts (--collector-metrics-port): what the alerts read.
    _stat("Hang active", f"max by (job) (xpu_diag_hang_active{{{J}}})", "hang", 0),
    _stat("Hangs declared", f"max by (job) (xpu_diag_hangs_total{{{J}}})", "hangs", 6),
    _stat("SLOW episodes open", f"sum by (job) (xpu_diag_slow_episodes_open{{{J}}})", "open", 12),
    _stat("Ranks reporting", f"count by (job) (xpu_diag_steps_total{{{J}}})", "ranks", 18),
    _series("SLOW episodes open by rule and rank",
            [_t(f"sum by (rule, rank) (xpu_diag_slow_episodes_open{{{J}}})", "{{rule}} rank {{rank}}")],
            "none", 0, 4, 24),
    # The agents' per-rank figures.
    _series("Step time per rank", [_t(f"max by (rank) (xpu_diag_step_seconds{{{J}}})", "rank {{rank}}")],
            "s", 0, 12),
    _series("Steps per second per rank",
            [_t(f"sum by (rank) (rate(xpu_diag_steps_total{{{J}}}[$__rate_interval]))", "rank {{rank}}")],
            "ops", 12, 12),
    _series("Collective wait share per rank (lowest: the rank the others wait for)",
            [_t(f"max by (rank) (xpu_diag_collective_wait_ratio{{{J}}})", "rank {{rank}}")],
            "percentunit", 0, 20),
    _series("Oldest op in flight per rank (grows while a rank hangs)",
            [_t(f"max by (rank, op, group) (xpu_diag_op_in_flight_seconds{{{J}}})", 'rank {{rank}} {{op}} "{{group}}"')],
            "s", 0, 44, 24),
    _series("GEMM TFLOP/s per rank (GPU ranks only)",
            [_t(f"max by (rank) (xpu_diag_gemm_flops_per_second{{{J}}}) / 1e12", "rank {{rank}}")],
            "none", 12, 20),
    _series("Bus bandwidth per op and rank, GB/s",
            [_t(f"max by (op, rank) (xpu_diag_op_busbw_bytes_per_second{{{J}}}) / 1e9", "{{op}} rank {{rank}}")],
            "none", 0, 28),
    _series("Op duration p99 over the window",
            [_t(f'max by (op, rank) (xpu_diag_op_duration_seconds{{{J},quantile="0.99"}})', "{{op}} rank {{rank}}")],
            "s", 12, 28),
    _series("Mean op duration (summary _sum / _count)",
            [_t(f"sum by (op) (rate(xpu_diag_op_duration_seconds_sum{{{J}}}[$__rate_interval]))"
                f" / sum by (op) (rate(xpu_diag_op_duration_seconds_count{{{J}}}[$__rate_interval]))", "{{op}}")],
            "s", 0, 36),
    _series("Throttled GPUs",
            [_t(f"count by (job) (xpu_diag_gpu_clocks_event_reasons{{{J}}} > 0)", "throttled")],
            "none", 12, 36),
]

DASHBOARD = Dashboard(
    title="xpu-diag", uid="xpu-diag", tags=["xpu-diag"], timezone="utc", refresh="10s",
    inputs=[DataSourceInput(name="DS_PROMETHEUS", label="Prometheus", pluginId="prometheus",
                            pluginName="Prometheus")],
    templating=Templating(list=[Template(name="job", label="job", dataSource=DS,
                                         query="label_values(xpu_diag_steps_total, job)", refresh=2)]),
    panels=PANELS,
).auto_panel_ids()


def render() -> str:
    return json.dumps(DASHBOARD.to_json_data(), cls=DashboardEncoder, indent=2, sort_keys=True) + "\n"


def queries() -> list[str]:
    """Every panel's PromQL expression (the $job template is label_values())."""
    doc = json.loads(render())
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


if __name__ == "__main__":
    out = sys.argv[1]
    with open(out + ".tmp", "w") as f:
        f.write(render())
    os.replace(out + ".tmp", out)
