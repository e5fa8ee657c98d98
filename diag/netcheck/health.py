"""Link and GPU health from NVML, as findings with reason codes.

Codes (docs/netcheck.md): PCIE_GEN_DOWNGRADED, PCIE_WIDTH_DOWNGRADED,
PCIE_REPLAYS, NVLINK_DOWN, NVLINK_ERRORS, ECC_UNCORRECTED,
ECC_UNCORRECTED_AGGREGATE, RETIRED_PAGES, REMAPPED_ROWS_FAILED,
REMAP_PENDING, XID. A query NVML cannot answer on this GPU is skipped and
listed once per GPU under NVML_UNAVAILABLE (info), never counted as a fault.
"""

from __future__ import annotations

from dataclasses import dataclass

from diag.netcheck.nvml import Nvml, try_query
from diag.netcheck.topology import NVLINK_ACTIVE, Gpu

FAIL, WARN, INFO = "fail", "warn", "info"
REPLAY_FAIL = 1000                 # PCIe replays: > 0 warns, this many fails
NVLINK_COUNTERS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}
ECC_UNCORRECTED, VOLATILE, AGGREGATE = 1, 0, 1
RETIRE_SBE, RETIRE_DBE = 0, 1


@dataclass
class Finding:
    gpu: int | None
    code: str
    severity: str
    message: str
    value: float | None = None
    expected: float | None = None
    link: str | None = None


def _pcie(nvml: Nvml, gpu: Gpu, under_load: bool, missing: list[str]) -> list[Finding]:
    i, out = gpu.index, []
    for what, cur_fn, max_fn, code in (
            ("generation", "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
             "PCIE_GEN_DOWNGRADED"),
            ("width", "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth", "PCIE_WIDTH_DOWNGRADED")):
        cur, top = try_query(nvml, cur_fn, i), try_query(nvml, max_fn, i)
        if cur is None or top is None:
            missing.append(f"pcie {what}")
            continue
        if cur < top:
            # An idle GPU drops its PCIe generation to save power; only a link read
            # while copying is down-trained for sure.
            sev = FAIL if (under_load or code == "PCIE_WIDTH_DOWNGRADED") else WARN
            out.append(Finding(i, code, sev, f"PCIe {what} {cur} < max {top}"
                               + ("" if under_load else " (read at idle)"), cur, top, "pcie"))
    replays = try_query(nvml, "nvmlDeviceGetPcieReplayCounter", i)
    if replays is None:
        missing.append("pcie replay counter")
    elif replays > 0:
        out.append(Finding(i, "PCIE_REPLAYS", FAIL if replays >= REPLAY_FAIL else WARN,
                           f"PCIe replay counter {replays}", replays, 0, "pcie"))
    return out


def _nvlink(nvml: Nvml, gpu: Gpu) -> list[Finding]:
    out = []
    if not any(s == NVLINK_ACTIVE for s in gpu.nvlink_state.values()):
        return out          # no NVLink in use on this GPU: nothing to judge
    for link, state in sorted(gpu.nvlink_state.items()):
        where = f"nvlink{link}"
        if state != NVLINK_ACTIVE:
            out.append(Finding(gpu.index, "NVLINK_DOWN", FAIL, f"NVLink {link} is inactive while others are up",
                               state, NVLINK_ACTIVE, where))
            continue
        for counter, name in NVLINK_COUNTERS.items():
            value = try_query(nvml, "nvmlDeviceGetNvLinkErrorCounter", gpu.index, link, counter)
            if value:
                out.append(Finding(gpu.index, "NVLINK_ERRORS", WARN, f"NVLink {link} {name} errors {value}",
                                   value, 0, where))
    return out


def _memory(nvml: Nvml, i: int, missing: list[str]) -> list[Finding]:
    out = []
    volatile = try_query(nvml, "nvmlDeviceGetTotalEccErrors", i, ECC_UNCORRECTED, VOLATILE)
    aggregate = try_query(nvml, "nvmlDeviceGetTotalEccErrors", i, ECC_UNCORRECTED, AGGREGATE)
    if volatile is None and aggregate is None:
        missing.append("ecc")
    if volatile:
        out.append(Finding(i, "ECC_UNCORRECTED", FAIL, f"{volatile} uncorrected ECC errors since boot", volatile, 0))
    elif aggregate:
        out.append(Finding(i, "ECC_UNCORRECTED_AGGREGATE", WARN, f"{aggregate} uncorrected ECC errors (lifetime)",
                           aggregate, 0))
    pages = [try_query(nvml, "nvmlDeviceGetRetiredPages", i, c) for c in (RETIRE_SBE, RETIRE_DBE)]
    if any(p for p in pages):
        out.append(Finding(i, "RETIRED_PAGES", WARN, f"retired pages: {pages[0] or 0} SBE, {pages[1] or 0} DBE",
                           float((pages[0] or 0) + (pages[1] or 0)), 0))
    rows = try_query(nvml, "nvmlDeviceGetRemappedRows", i)
    if rows is None and all(p is None for p in pages):
        missing.append("retired pages / remapped rows")
    if rows:
        corrected, uncorrected, pending, failed = (list(rows) + [0, 0, 0, 0])[:4]
        if failed:
            out.append(Finding(i, "REMAPPED_ROWS_FAILED", FAIL, "row remapping failed: the GPU needs service",
                               1, 0))
        elif pending:
            out.append(Finding(i, "REMAP_PENDING", WARN, "row remap pending: reset the GPU", 1, 0))
    return out


def link_health(nvml: Nvml, gpus: list[Gpu], under_load: bool = False) -> list[Finding]:
    """Every finding for ``gpus``; XID events collected since watch_xid() included."""
    out: list[Finding] = []
    for gpu in gpus:
        missing: list[str] = []
        out += _pcie(nvml, gpu, under_load, missing)
        out += _nvlink(nvml, gpu)
        out += _memory(nvml, gpu.index, missing)
        if missing:
            out.append(Finding(gpu.index, "NVML_UNAVAILABLE", INFO, "not reported by NVML: " + ", ".join(missing)))
    uuids = {try_query(nvml, "nvmlDeviceGetUUID", g.index): g.index for g in gpus}
    for event in try_query(nvml, "xidEvents") or []:
        gpu = uuids.get(event.get("gpu_uuid"))
        out.append(Finding(gpu, "XID", FAIL, f"XID {event.get('xid')} during the check", event.get("xid")))
    return out
