"""The agent's ``xpu_diag_gpu_*`` Prometheus series (docs/metrics.md).

Only what the verdicts read, one series per rank (labelled by rank and GPU,
so they join with the rank's own series), units in the names. Not a copy of
dcgm-exporter: run that for the full picture of a GPU.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from diag.gpu.api import GpuHealth

LABELS = ("job", "node", "rank", "local_rank", "gpu", "gpu_uuid", "nvidia_smi_index")

# family key -> (metric name, help, GpuSample field, scale)
GAUGES = (
    ("xpu_diag_gpu_sm_clock_hertz", "SM clock", "sm_clock_mhz", 1e6),
    ("xpu_diag_gpu_sm_clock_max_hertz", "Highest SM clock the GPU allows", "sm_clock_max_mhz", 1e6),
    ("xpu_diag_gpu_clocks_event_reasons", "NVML clocks event (throttle) reasons, a bitmask "
     "(nvmlClocksEventReason*; 0x40 HW thermal, 0x80 HW power brake, 0x8 HW slowdown)", "throttle_reasons", 1),
    ("xpu_diag_gpu_temperature_celsius", "GPU temperature", "temperature_c", 1),
    ("xpu_diag_gpu_power_watts", "Power draw", "power_w", 1),
    ("xpu_diag_gpu_power_limit_watts", "Enforced power limit", "power_limit_w", 1),
    ("xpu_diag_gpu_ecc_uncorrected_errors", "Uncorrected ECC errors since the driver loaded (volatile)",
     "ecc_uncorrected", 1),
    ("xpu_diag_gpu_remapped_rows_pending", "1: a row remap waits for a GPU reset", "remapped_rows_pending", 1),
    ("xpu_diag_gpu_remapped_rows_failed", "1: row remapping failed (the GPU needs service)",
     "remapped_rows_failed", 1),
    ("xpu_diag_gpu_pcie_link_generation", "Current PCIe link generation", "pcie_gen", 1),
    ("xpu_diag_gpu_pcie_link_width_lanes", "Current PCIe link width", "pcie_width", 1),
    ("xpu_diag_gpu_nvlink_errors", "NVLink replay, recovery and CRC errors summed over the active links",
     "nvlink_errors", 1),
)


def families(rows) -> list:
    """``rows``: ((job, node, rank, local_rank, GpuHealth, {xid: count}), ...)."""
    gauges = {name: GaugeMetricFamily(name, text, labels=LABELS) for name, text, _, _ in GAUGES}
    throttled = GaugeMetricFamily("xpu_diag_gpu_throttled_seconds", "How long the present throttle reasons "
                                  "have held, as of the last sample (0: none)", labels=LABELS)
    xids = CounterMetricFamily("xpu_diag_gpu_xid_events", "XID events on the GPU since the agent started",
                               labels=LABELS + ("xid",))
    for job, node, rank, local_rank, health, xid_counts in rows:
        labels = [job, node, str(rank), str(local_rank)] + label_values(health)
        for code, count in sorted(xid_counts.items()):
            xids.add_metric(labels + [str(code)], count)
        sample = health.latest
        if sample is None:
            continue
        for name, _, field, scale in GAUGES:
            value = getattr(sample, field)
            if value is not None:
                gauges[name].add_metric(labels, float(value) * scale)
        since = health.throttled_since_unix_s
        throttled.add_metric(labels, max(0.0, sample.unix_s - since) if since else 0.0)
    return list(gauges.values()) + [throttled, xids]


def label_values(health: GpuHealth | None) -> list[str]:
    """gpu (the PCI bus id), gpu_uuid, nvidia_smi_index; "" where unknown."""
    if health is None:
        return ["", "", ""]
    i = health.identity
    return [i.pci_bus_id, i.uuid, str(i.index) if i.index >= 0 else ""]
