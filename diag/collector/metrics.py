"""The collector's Prometheus endpoint (--collector-metrics-port): its
verdicts as series, so an alert can page (docs/metrics.md, "Alerts").

Only what the collector alone knows: whether a hang is declared and lasting,
how many were, and which SLOW episodes are open. Per-rank figures stay on the
agents' endpoints. A scrape reads the watchdog's published state (plain
reads of references and ints): it never takes a lock the watchdog holds.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from diag.common.metrics_http import MetricsEndpoint
from diag.slow.api import RULE_SLOW_GPU, RULE_SLOW_LINK, RULE_STRAGGLER

RULES = (RULE_SLOW_GPU, RULE_STRAGGLER, RULE_SLOW_LINK)
# Open episodes named by rank, per rule; beyond this they count under
# rank="other", so a storm of findings cannot blow up the series count.
MAX_RANK_SERIES = 16


class VerdictCollector:
    """A prometheus_client custom collector over the watchdog's state."""

    def __init__(self, job_id: str, watchdog) -> None:
        self.job_id = job_id
        self.watchdog = watchdog

    def describe(self):
        return []

    def collect(self):
        wd, job = self.watchdog, [self.job_id]
        active = GaugeMetricFamily("xpu_diag_hang_active", "1 while a declared hang (HANG, or an idle "
                                   "stall) lasts, 0 otherwise", labels=["job"])
        active.add_metric(job, 1.0 if wd.hang_active() else 0.0)
        hangs = CounterMetricFamily("xpu_diag_hangs", "Hangs declared since the collector started "
                                    "(HANG lines, idle stalls included)", labels=["job"])
        hangs.add_metric(job, len(wd.declared))
        slow_total = CounterMetricFamily("xpu_diag_slow_episodes", "SLOW episodes declared since the "
                                         "collector started", labels=["job", "rule"])
        declared = [doc.get("rule") for _, doc in list(wd.slow.declared)]
        for rule in RULES:
            slow_total.add_metric(job + [rule], declared.count(rule))
        slow_open = GaugeMetricFamily("xpu_diag_slow_episodes_open", "SLOW episodes declared and not yet "
                                      "recovered, by rule and the lowest rank each names", labels=["job", "rule", "rank"])
        for (rule, rank), n in open_by_rank(wd.slow.detector.open).items():
            slow_open.add_metric(job + [rule, rank], n)
        return [active, hangs, slow_total, slow_open]


def open_by_rank(open_keys) -> dict:
    """{(rule, rank label): open episodes} from the detector's episode keys
    ``(rule, ranks, comm_id)``; at most MAX_RANK_SERIES ranks per rule."""
    out: dict = {}
    for rule, ranks, _comm in sorted(open_keys, key=lambda k: (k[0], min(k[1], default=-1))):
        named = {r for (ru, r) in out if ru == rule and r != "other"}
        rank = str(min(ranks)) if ranks else "other"
        if rank not in named and len(named) >= MAX_RANK_SERIES:
            rank = "other"
        out[(rule, rank)] = out.get((rule, rank), 0) + 1
    return out


class VerdictExporter(MetricsEndpoint):
    """The collector's /metrics: hang detection never waits on it."""

    def __init__(self, job_id: str, watchdog) -> None:
        super().__init__(VerdictCollector(job_id, watchdog), "collector metrics endpoint",
                         "hang detection goes on", "--collector-metrics-port")
