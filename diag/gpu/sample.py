"""One NVML reading of one GPU, and a rank's device -> its NVML index (pure
over an ``Nvml``: the real library, a recorder or a replay)."""

from __future__ import annotations

from typing import Any

from diag.gpu.api import GpuIdentity, GpuSample
from diag.gpu.nvml import NVLINK_MAX_LINKS, Nvml, try_query

NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
ECC_UNCORRECTED, VOLATILE = 1, 0
NVLINK_COUNTERS = (0, 1, 2, 3)      # replay, recovery, CRC flit, CRC data
CLOCK_REASONS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


def pci_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:1B:00.0`` -> ``0000:1b:00.0`` (the lspci / sysfs form)."""
    text = (nvml_bus_id or "").strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep:
        return text
    return f"{int(domain, 16):04x}:{rest}" if all(c in "0123456789abcdef" for c in domain) else text


def identity_of(nvml: Nvml, index: int, cuda_device: int = -1) -> GpuIdentity:
    """The identity of NVML device ``index`` (fields NVML cannot give stay empty)."""
    pci = try_query(nvml, "nvmlDeviceGetPciInfo", index)
    return GpuIdentity(pci_bus_id=pci_bus_id(pci.get("busId", "")) if isinstance(pci, dict) else "",
                       uuid=try_query(nvml, "nvmlDeviceGetUUID", index) or "", index=index,
                       cuda_device=cuda_device, name=try_query(nvml, "nvmlDeviceGetName", index) or "")


def resolve(nvml: Nvml | None, want: GpuIdentity, visible: str) -> GpuIdentity:
    """The rank's device as NVML knows it. ``want`` is what the rank said (its
    CUDA ordinal, and the UUID / PCI bus id where its CUDA runtime gave them);
    ``visible`` the CUDA_VISIBLE_DEVICES entry of that ordinal ("" unset).

    Matched by UUID, then PCI bus id, then the visible entry (an index or a
    UUID prefix), then, with no CUDA_VISIBLE_DEVICES, the ordinal itself.
    Without NVML, or with no match, ``want`` comes back as it is."""
    if nvml is None:
        return want
    count = try_query(nvml, "nvmlDeviceGetCount") or 0
    known = [identity_of(nvml, i, want.cuda_device) for i in range(count)]
    for gpu in known:
        if want.uuid and gpu.uuid and gpu.uuid.lower() == want.uuid.lower():
            return gpu
    for gpu in known:
        if want.pci_bus_id and gpu.pci_bus_id == want.pci_bus_id:
            return gpu
    entry = visible.strip()
    if entry.isdigit() and int(entry) < count:
        return known[int(entry)]
    if entry.upper().startswith("GPU-"):
        hits = [g for g in known if g.uuid.lower().startswith(entry.lower())]
        if len(hits) == 1:
            return hits[0]
    if not entry and not want.uuid and not want.pci_bus_id and 0 <= want.cuda_device < count:
        return known[want.cuda_device]
    return want


def read(nvml: Nvml, index: int, now_unix: float, nvlink: bool = True) -> GpuSample:
    """Every field verdicts use, for GPU ``index``; a query NVML cannot answer is None."""
    q = lambda fn, *args: try_query(nvml, fn, index, *args)   # noqa: E731
    reasons = None
    for fn in CLOCK_REASONS:   # the newer name first; drivers before r535 have only the old one
        reasons = q(fn)
        if reasons is not None:
            break
    power, limit = q("nvmlDeviceGetPowerUsage"), q("nvmlDeviceGetEnforcedPowerLimit")
    rows = q("nvmlDeviceGetRemappedRows")
    rows = (list(rows) + [None] * 4)[:4] if isinstance(rows, list) else [None] * 4
    return GpuSample(
        unix_s=now_unix, throttle_reasons=reasons, sm_clock_mhz=q("nvmlDeviceGetClockInfo", NVML_CLOCK_SM),
        sm_clock_max_mhz=q("nvmlDeviceGetMaxClockInfo", NVML_CLOCK_SM),
        temperature_c=q("nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU),
        power_w=None if power is None else power / 1000.0, power_limit_w=None if limit is None else limit / 1000.0,
        ecc_uncorrected=q("nvmlDeviceGetTotalEccErrors", ECC_UNCORRECTED, VOLATILE),
        remapped_rows_pending=None if rows[2] is None else bool(rows[2]),
        remapped_rows_failed=None if rows[3] is None else bool(rows[3]),
        pcie_gen=q("nvmlDeviceGetCurrPcieLinkGeneration"), pcie_width=q("nvmlDeviceGetCurrPcieLinkWidth"),
        pcie_max_gen=q("nvmlDeviceGetMaxPcieLinkGeneration"), pcie_max_width=q("nvmlDeviceGetMaxPcieLinkWidth"),
        nvlink_errors=_nvlink_errors(nvml, index) if nvlink else None)


def _nvlink_errors(nvml: Nvml, index: int) -> int | None:
    """Error counters summed over the active links; None without NVLink."""
    total, any_link = 0, False
    for link in range(NVLINK_MAX_LINKS):
        state = try_query(nvml, "nvmlDeviceGetNvLinkState", index, link)
        if state is None:
            break       # past the GPU's last link
        if state != 1:
            continue
        any_link = True
        for counter in NVLINK_COUNTERS:
            value: Any = try_query(nvml, "nvmlDeviceGetNvLinkErrorCounter", index, link, counter)
            total += value or 0
    return total if any_link else None
