"""Contracts of the GPU-health view (docs/gpu.md): which physical GPU a rank
runs on, what NVML said about it, and the events (XIDs, fatal ECC) seen.

Pure data: the agent fills them from NVML (or a recording), the collector
reads them back from the proto (``diag.gpu.wire``) to name causes in verdicts.
"""

from __future__ import annotations

import dataclasses


class GpuError(Exception):
    """NVML cannot be used here, or a recording cannot be read; one line."""


@dataclasses.dataclass(frozen=True)
class GpuIdentity:
    """The physical GPU, named the same way everywhere (lines, JSON, labels).

    ``pci_bus_id`` is the lspci form ``0000:1b:00.0`` (lower case, 4-digit
    domain); ``uuid`` NVML's ``GPU-...``; ``index`` the nvidia-smi index (-1
    unknown: no NVML); ``cuda_device`` the CUDA ordinal the rank uses, as its
    process sees it (after CUDA_VISIBLE_DEVICES).
    """

    pci_bus_id: str = ""
    uuid: str = ""
    index: int = -1
    cuda_device: int = -1
    name: str = ""

    @property
    def known(self) -> bool:
        return bool(self.pci_bus_id or self.uuid or self.index >= 0)

    @property
    def key(self) -> str:
        """What tells two GPUs apart on one host."""
        return self.uuid or self.pci_bus_id or (f"index {self.index}" if self.index >= 0 else "")

    def phrase(self) -> str:
        """``gpu 0000:1b:00.0 (GPU-8c1f1234..., nvidia-smi index 3)``."""
        head = self.pci_bus_id or (short_uuid(self.uuid) if self.uuid else f"index {self.index}")
        extra = []
        if self.uuid and self.pci_bus_id:
            extra.append(short_uuid(self.uuid))
        if self.index >= 0:
            extra.append(f"nvidia-smi index {self.index}")
        return f"gpu {head}" + (f" ({', '.join(extra)})" if extra else "")

    def to_dict(self) -> dict:
        """hang.json / slow.json ``gpu`` (docs/event-dir.md); None for unknown fields."""
        return {"pci_bus_id": self.pci_bus_id or None, "uuid": self.uuid or None,
                "nvidia_smi_index": self.index if self.index >= 0 else None,
                "cuda_device": self.cuda_device if self.cuda_device >= 0 else None,
                "name": self.name or None}


# GpuHealth.nvml while the agent has NVML but has not matched the rank's
# device yet: the identity lacks its nvidia-smi index for one sample interval.
NOT_SAMPLED = "not sampled yet"


def short_uuid(uuid: str) -> str:
    """``GPU-8c1f1234...``: enough to pick the card out of ``nvidia-smi -L``."""
    prefix, _, rest = uuid.partition("-")
    return f"{prefix}-{rest[:8]}..." if rest and len(rest) > 8 else uuid


@dataclasses.dataclass(frozen=True)
class GpuSample:
    """One NVML reading of one GPU; None: NVML did not answer that query."""

    unix_s: float
    throttle_reasons: int | None = None     # NVML clocks event reasons bitmask
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    ecc_uncorrected: int | None = None      # volatile (since the driver loaded)
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    nvlink_errors: int | None = None        # replay + recovery + CRC, summed over the links


@dataclasses.dataclass(frozen=True)
class GpuEvent:
    """An XID or a fatal ECC sighting on one GPU (``diag.gpu.xid`` names it)."""

    unix_s: float
    kind: str           # "xid" or "ecc"
    code: int           # the XID number; for "ecc", the new uncorrected error count
    text: str           # what it means, in a few words
    fatal: bool         # hardware: the node belongs on the fault list

    def phrase(self) -> str:
        what = f"XID {self.code} ({self.text})" if self.kind == "xid" else self.text
        return what


@dataclasses.dataclass(frozen=True)
class GpuHealth:
    """What one rank's GPU looked like over the agent's window."""

    identity: GpuIdentity
    latest: GpuSample | None = None
    throttled_since_unix_s: float = 0.0     # when the present throttle reasons first showed
    events: tuple[GpuEvent, ...] = ()       # XIDs and fatal ECC within the window
    nvml: str = ""                          # "" NVML answers; else why it does not
