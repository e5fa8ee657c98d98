"""GPUs, their links and the switchbox pairs, read through the Nvml interface."""

from __future__ import annotations

from dataclasses import dataclass, field

from diag.netcheck.nvml import NVLINK_MAX_LINKS, Nvml, try_query

LEVEL_NAMES = {0: "same board", 10: "one PCIe switch", 20: "PCIe switches", 30: "host bridge",
               40: "NUMA node", 50: "system"}
SWITCH_LEVELS = (10, 20)          # NVML_TOPOLOGY_SINGLE / _MULTIPLE: share a PCIe switch
P2P_READ, P2P_NVLINK, P2P_OK = 0, 2, 0
NVLINK_ACTIVE = 1


def bus_id(text: str | None) -> str:
    """``0000:1b:00.0`` and ``00000000:1B:00.0`` compare equal."""
    if not text:
        return ""
    parts = text.strip().upper().split(":")
    if len(parts) == 3:
        parts[0] = parts[0][-4:].rjust(4, "0")
    return ":".join(parts)


@dataclass
class Gpu:
    index: int
    name: str
    bus_id: str
    nvlink_state: dict[int, int] = field(default_factory=dict)     # link -> 1 active / 0 inactive
    nvlink_remote: dict[int, str] = field(default_factory=dict)    # link -> remote bus id


@dataclass(frozen=True)
class BoxPair:
    a: int
    b: int
    kind: str          # nvlink | pcie-switch | given | fallback

    def label(self) -> str:
        return f"{self.a}:{self.b}"


def read_gpus(nvml: Nvml) -> list[Gpu]:
    count = try_query(nvml, "nvmlDeviceGetCount") or 0
    gpus = []
    for i in range(count):
        pci = try_query(nvml, "nvmlDeviceGetPciInfo", i) or {}
        gpu = Gpu(i, try_query(nvml, "nvmlDeviceGetName", i) or f"GPU {i}", bus_id(pci.get("busId")))
        for link in range(NVLINK_MAX_LINKS):
            state = try_query(nvml, "nvmlDeviceGetNvLinkState", i, link)
            if state is None:
                continue
            gpu.nvlink_state[link] = int(state)
            remote = try_query(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", i, link)
            if remote:
                gpu.nvlink_remote[link] = bus_id(remote.get("busId"))
        gpus.append(gpu)
    return gpus


def _linked(nvml: Nvml, gpus: list[Gpu], a: Gpu, b: Gpu) -> str | None:
    """How a and b are connected, closest first: nvlink, pcie-switch, or None."""
    direct = any(r == b.bus_id for r in a.nvlink_remote.values()) if b.bus_id else False
    if direct or try_query(nvml, "nvmlDeviceGetP2PStatus", a.index, b.index, P2P_NVLINK) == P2P_OK:
        return "nvlink"
    if try_query(nvml, "nvmlDeviceGetTopologyCommonAncestor", a.index, b.index) in SWITCH_LEVELS:
        return "pcie-switch"
    return None


def discover_pairs(nvml: Nvml, gpus: list[Gpu]) -> tuple[list[BoxPair], str]:
    """Disjoint pairs: NVLink-linked first, then GPUs under one PCIe switch.

    Returns (pairs, note); with no linked GPUs at all, pairs neighbours by
    index and says so in the note.
    """
    rank = {"nvlink": 0, "pcie-switch": 1}
    edges = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            kind = _linked(nvml, gpus, a, b)
            if kind:
                edges.append((rank[kind], a.index, b.index, kind))
    used: set[int] = set()
    pairs = []
    for _, a, b, kind in sorted(edges):
        if a not in used and b not in used:
            pairs.append(BoxPair(a, b, kind))
            used.update((a, b))
    if pairs or len(gpus) < 2:
        return pairs, "" if pairs else "fewer than 2 GPUs: no pairs"
    fallback = [BoxPair(gpus[i].index, gpus[i + 1].index, "fallback") for i in range(0, len(gpus) - 1, 2)]
    return fallback, "no NVLink or shared PCIe switch found; paired neighbours by index"


def switch_groups(nvml: Nvml, gpus: list[Gpu]) -> list[list[int]]:
    """GPUs that share a PCIe switch (union of SINGLE/MULTIPLE links); singletons left out."""
    parent = {g.index: g.index for g in gpus}

    def root(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            if try_query(nvml, "nvmlDeviceGetTopologyCommonAncestor", a.index, b.index) in SWITCH_LEVELS:
                parent[root(a.index)] = root(b.index)
    groups: dict[int, list[int]] = {}
    for g in gpus:
        groups.setdefault(root(g.index), []).append(g.index)
    return sorted(sorted(m) for m in groups.values() if len(m) > 1)
