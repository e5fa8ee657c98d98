"""The agent's Prometheus endpoint (prometheus_client): docs/metrics.md.

A scrape reads an immutable snapshot that the agent's sampler thread replaces
about once a second (``Exporter.publish``); it never takes the agent's lock,
so a slow or stuck scraper cannot hold up sampling. Cardinality is bounded:
per rank at most MAX_OPS_PER_RANK op keys (the rest fold into "other"), GEMMs
and kernel launches are per-rank totals (kernel names are never labels).
"""

from __future__ import annotations

import dataclasses

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from diag.common.metrics_http import MetricsEndpoint
from diag.perf import derive
from diag.records import format as fmt

# gpu: the rank's GPU by PCI bus id (docs/gpu.md), "" when it named none.
BASE = ("job", "node", "rank", "local_rank", "gpu")
# group: the process group as the HANG line names it ("default", torch's
# group_desc, "pg N"; "" for host functions and groups not yet named);
# comm: its id, for tools that join on it.
OP_LABELS = BASE + ("op", "comm", "group")
OP_KINDS = (fmt.KIND_COLLECTIVE, fmt.KIND_P2P, fmt.KIND_HOST_FUNC)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    job: str
    node: str
    # ((rank, local_rank, pb.PerfRank, gpu[, {comm id: group name}[, in flight]]), ...); in flight:
    # (name, kind, group id, age s) of the rank's oldest op in flight, or None.
    ranks: tuple = ()
    gpus: tuple = ()             # diag.gpu.metrics.families rows


def comm_label(comm_id: int) -> str:
    return f"{comm_id:016x}"


def group_label(kind: int, comm_id: int, names: dict) -> str:
    """The group's display name, as in the HANG line and hang.json."""
    if kind == fmt.KIND_HOST_FUNC:
        return ""
    return names.get(comm_id) or ("default" if comm_id == 0 else "")


class PerfCollector:
    """A prometheus_client custom collector over the latest Snapshot."""

    def __init__(self):
        self.snapshot = Snapshot("", "")

    def describe(self):
        return []   # no collect() at registration: the snapshot may be empty then

    def collect(self):
        snap = self.snapshot   # one read of a reference: no lock, no waiting
        fams = _families()
        for rank, local_rank, perf, *rest in snap.ranks:
            base = [snap.job, snap.node, str(rank), str(local_rank), rest[0] if rest else ""]
            names = rest[1] if len(rest) > 1 else {}
            _rank_metrics(fams, base, rank, perf, names)
            if len(rest) > 2 and rest[2] is not None:
                name, kind, comm_id, age_s = rest[2]
                fams["in_flight"].add_metric(base + [name, comm_label(comm_id), group_label(kind, comm_id, names)],
                                             age_s)
        out = list(fams.values())
        if snap.gpus:
            from diag.gpu import metrics as gpu_metrics
            out += gpu_metrics.families(snap.gpus)
        return out


def _families() -> dict:
    g, c = GaugeMetricFamily, CounterMetricFamily
    return {
        "window": g("xpu_diag_window_seconds", "Wall time the sliding window covers", labels=BASE),
        "gemm_rate": g("xpu_diag_gemm_flops_per_second",
                       "GEMM FLOP/s over the window: device-timed FLOPs / their device time",
                       labels=BASE),
        "gemm_calls": c("xpu_diag_gemm_calls", "GEMM calls since the rank started", labels=BASE),
        "gemm_flops": c("xpu_diag_gemm_flops", "GEMM FLOPs since the rank started", labels=BASE),
        "launches": c("xpu_diag_kernel_launches", "Kernel launches counted by the hook",
                      labels=BASE),
        "wait": g("xpu_diag_collective_wait_ratio",
                  "Share of wall time inside collectives and p2p over the window (0..1)",
                  labels=BASE),
        "step": g("xpu_diag_step_seconds", "Mean time between steps over the window",
                  labels=BASE),
        "steps": c("xpu_diag_steps", "Step-function calls (--perf-step) since the rank started",
                   labels=BASE),
        "op_calls": c("xpu_diag_op_calls", "Collective, p2p and host-function calls",
                      labels=OP_LABELS),
        "op_bytes": c("xpu_diag_op_bytes", "Bytes of collective and p2p calls (nccl-tests "
                      "convention)", labels=OP_LABELS),
        "op_timed": c("xpu_diag_op_timed_seconds", "Duration of the timed calls (all Python-"
                      "traced calls; the hook's device-timed sample)", labels=OP_LABELS),
        "op_timed_calls": c("xpu_diag_op_timed_calls", "Calls that carry a duration",
                            labels=OP_LABELS),
        # A real summary, as a client library's is: quantiles over a sliding
        # window (ours), _sum and _count cumulative since the rank started.
        "op_duration": Metric("xpu_diag_op_duration_seconds", "Duration of the timed calls: p50 and "
                              "p99 over the window; _sum and _count since the rank started", "summary"),
        "busbw": g("xpu_diag_op_busbw_bytes_per_second", "Bus bandwidth over the window "
                   "(nccl-tests factors)", labels=OP_LABELS),
        # One series per rank while it is in an op: a hung rank's age grows
        # where the window's figures (ENDs only) would look healthy.
        "in_flight": g("xpu_diag_op_in_flight_seconds", "Age of the rank's oldest collective, p2p or "
                       "host-function call still in flight; no series while it is in none", labels=OP_LABELS),
    }


def _rank_metrics(fams: dict, base: list, rank: int, perf, names: dict) -> None:
    fig = derive.figures(rank, perf)
    fams["window"].add_metric(base, fig.window_s)
    # No GEMM rate without a device-timed GEMM in the window (a CPU job, a
    # rank between GEMM phases): a 0 would be the "slowest GPU" of any min().
    if any(op.kind == fmt.KIND_GEMM and op.timed_ns for op in perf.ops):
        fams["gemm_rate"].add_metric(base, fig.gemm_tflops * 1e12)
    # No wait share before the rank's first collective and no step time before
    # its first step: a 0 there would make it "the rank that waits least" or
    # "the fastest step" on every dashboard while it is still starting up.
    if fig.window_s > 0 and (any(t.kind in derive.COMM_KINDS and t.count for t in perf.totals)
                             or derive.open_ns(perf, None)):   # hung in its first collective
        fams["wait"].add_metric(base, fig.wait_share)
    if fig.step_s > 0:
        fams["step"].add_metric(base, fig.step_s)
    fams["steps"].add_metric(base, perf.steps_total)
    fams["launches"].add_metric(base, perf.launches_total)
    gemms = [t for t in perf.totals if t.kind == fmt.KIND_GEMM]
    fams["gemm_calls"].add_metric(base, sum(t.count for t in gemms))
    fams["gemm_flops"].add_metric(base, sum(t.flops for t in gemms))
    for t in perf.totals:
        if t.kind not in OP_KINDS:
            continue
        labels = base + [t.name, comm_label(t.comm_id), group_label(t.kind, t.comm_id, names)]
        fams["op_calls"].add_metric(labels, t.count)
        fams["op_bytes"].add_metric(labels, t.bytes)
        fams["op_timed"].add_metric(labels, t.timed_ns / 1e9)
        fams["op_timed_calls"].add_metric(labels, t.timed_count)
        if t.timed_count:
            _summary(fams["op_duration"], labels, sum_s=t.timed_ns / 1e9, count=t.timed_count)
    for op, figs in zip(perf.ops, fig.ops):
        if op.kind not in OP_KINDS:
            continue
        labels = base + [op.name, comm_label(op.comm_id), group_label(op.kind, op.comm_id, names)]
        if op.timed_count:
            _summary(fams["op_duration"], labels, quantiles=((0.5, figs.p50_s), (0.99, figs.p99_s)))
        if figs.busbw is not None:   # no series where undefined (one rank, nothing timed)
            fams["busbw"].add_metric(labels, figs.busbw)


def _summary(fam: Metric, labels: list, sum_s=None, count=None, quantiles=()) -> None:
    """Samples of one summary series (prometheus_client's SummaryMetricFamily
    takes no quantiles). The text format wants a family's samples grouped,
    not per series in order, so callers may add a series' parts separately."""
    named = dict(zip(OP_LABELS, labels))
    for q, value in quantiles:
        fam.add_sample(fam.name, dict(named, quantile=str(q)), value)
    if count is not None:
        fam.add_sample(fam.name + "_sum", named, sum_s)
        fam.add_sample(fam.name + "_count", named, count)


class Exporter(MetricsEndpoint):
    """The agent's /metrics; ``publish`` swaps in a new snapshot."""

    def __init__(self, job: str, node: str):
        self.collector = PerfCollector()
        self.collector.snapshot = Snapshot(job, node)
        super().__init__(self.collector, "metrics endpoint", "training goes on", "--metrics-port")

    def publish(self, ranks, gpus=()) -> None:
        old = self.collector.snapshot
        self.collector.snapshot = Snapshot(old.job, old.node, tuple(ranks), tuple(gpus))
