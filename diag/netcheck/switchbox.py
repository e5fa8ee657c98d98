"""The switchbox check: GPU <-> switch <-> GPU links inside one host.

Pairs come from --box-pairs or NVML topology (printed either way). Each pair
gets a peer copy each way, one pair at a time; every GPU gets host<->GPU
copies alone, and each PCIe-switch group all at once (a degraded uplink
shows only then). A *channel* is one direction of a pair at or above
--min-bandwidth MB/s; the node fails with fewer than --min-channels
channels, on a failing host copy, or on a failing NVML health finding.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from diag import faultlist
from diag.netcheck import rules
from diag.netcheck.api import (FAIL, INFO, PASS, RULE_ABSOLUTE, RULE_CHANNELS, RULE_HEALTH, Measurement,
                               NetcheckError)
from diag.netcheck.config import Config
from diag.netcheck.health import Finding, link_health
from diag.netcheck.nvml import Nvml, RealNvml, ReplayNvml
from diag.netcheck.report import Reporter
from diag.netcheck.topology import BoxPair, Gpu, discover_pairs, read_gpus, switch_groups


@dataclass
class BoxPlan:
    gpus: list[Gpu]
    pairs: list[BoxPair]
    groups: list[list[int]]
    note: str = ""


@dataclass
class BoxFigures:
    """Measured MB/s: peer[(a, b)] is a->b; host[g] and group[tuple] hold 'h2d'/'d2h'."""

    peer: dict[tuple[int, int], float] = field(default_factory=dict)
    host: dict[int, dict[str, float]] = field(default_factory=dict)
    group: dict[tuple[int, ...], dict[str, float]] = field(default_factory=dict)
    measured: bool = True


def plan_box(nvml: Nvml, box_pairs: list[tuple[int, int]] | None) -> BoxPlan:
    gpus = read_gpus(nvml)
    if box_pairs:
        known = {g.index for g in gpus}
        bad = [f"{a}:{b}" for a, b in box_pairs if a not in known or b not in known]
        if bad:
            raise NetcheckError(f"--box-pairs: {' '.join(bad)} name GPUs this host does not have "
                                f"(it has {len(gpus)})")
        pairs, note = [BoxPair(a, b, "given") for a, b in box_pairs], "from --box-pairs"
    else:
        pairs, note = discover_pairs(nvml, gpus)
        note = note or "discovered from NVML topology"
    return BoxPlan(gpus, pairs, switch_groups(nvml, gpus), note)


def measure_box(plan: BoxPlan, cfg: Config) -> BoxFigures:
    """Run the copies on this host's GPUs (CUDA only)."""
    import torch

    from diag.netcheck.api import TestContext
    from diag.netcheck.measure.hostcopy import HostCopy, concurrent_host_copy
    from diag.netcheck.measure.peercopy import PeerCopy
    from diag.netcheck.measure.timing import measure

    figs = BoxFigures()
    size, cpu = cfg.box.switchbox_size, torch.device("cpu")

    def mbs(test, src, dst) -> float:
        ctx = TestContext(size_bytes=size, device=dst if dst.type == "cuda" else src, timeout_s=cfg.measure.timeout,
                          src_device=src, dst_device=dst)
        return measure(test, ctx, cfg.measure.warmup, cfg.measure.iters).algbw_gbs * 1000.0
    for pair in plan.pairs:                       # one pair at a time: pairs share switches
        for a, b in ((pair.a, pair.b), (pair.b, pair.a)):
            figs.peer[(a, b)] = mbs(PeerCopy(), torch.device("cuda", a), torch.device("cuda", b))
    for gpu in plan.gpus:
        dev = torch.device("cuda", gpu.index)
        figs.host[gpu.index] = {"h2d": mbs(HostCopy(), cpu, dev), "d2h": mbs(HostCopy(), dev, cpu)}
    for group in plan.groups:
        figs.group[tuple(group)] = {d: concurrent_host_copy(group, size, d == "h2d", cfg.measure.iters)["aggregate_mbs"]
                                    for d in ("h2d", "d2h")}
    return figs


def _host_records(node: str, figs: BoxFigures, profile: dict | None, cfg: Config) -> list[Measurement]:
    out = []
    floor = profile.get("min_host_copy_mbs") if profile else None
    typical = profile.get("typical_host_copy_mbs") if profile else None
    th = rules.Thresholds(floor, cfg.thresholds.rel_ratio, cfg.thresholds.mad_z, typical)
    for direction in ("h2d", "d2h"):
        fleet = [v[direction] for v in figs.host.values()]
        for gpu, v in sorted(figs.host.items()):
            j = rules.judge(v[direction], fleet, th, f"host copy {direction}", "MB/s")
            out.append(Measurement(node, f"host_copy.{direction}", v[direction], "MB/s", gpu=gpu,
                                   link=f"host->gpu{gpu}" if direction == "h2d" else f"gpu{gpu}->host",
                                   expected=j.expected, threshold=j.threshold, verdict=j.verdict,
                                   reason=j.reason, rule=j.rule))
        groups = [v[direction] for v in figs.group.values()]
        for members, v in sorted(figs.group.items()):
            j = rules.judge(v[direction], groups, th, f"switch uplink {direction} (all GPUs at once)", "MB/s")
            out.append(Measurement(node, f"switch_copy.{direction}", v[direction], "MB/s",
                                   link="switch[" + ",".join(f"gpu{g}" for g in members) + "]",
                                   expected=j.expected, threshold=j.threshold, verdict=j.verdict,
                                   reason=j.reason, rule=j.rule, extra={"gpus": list(members)}))
    return out


def judge_box(node: str, plan: BoxPlan, figs: BoxFigures, findings: list[Finding], cfg: Config,
              profile: dict | None = None) -> tuple[list[Measurement], str | None]:
    """Records for everything measured and found, and the node's fault reason (None: healthy)."""
    records, reasons = [], []
    working = 0
    for pair in plan.pairs:
        for a, b in ((pair.a, pair.b), (pair.b, pair.a)):
            if (a, b) not in figs.peer:
                continue
            value = figs.peer[(a, b)]
            ok = value >= cfg.thresholds.min_bandwidth
            working += ok
            records.append(Measurement(node, "peer_copy", value, "MB/s", gpu=a, link=f"gpu{a}->gpu{b}",
                                       threshold=cfg.thresholds.min_bandwidth, verdict=PASS if ok else FAIL, rule="" if ok
                                       else RULE_ABSOLUTE, reason="" if ok else
                                       f"peer copy {value:.0f} MB/s < --min-bandwidth {cfg.thresholds.min_bandwidth:.0f} MB/s",
                                       extra={"pair_kind": pair.kind}))
    if figs.measured:
        ok = working >= cfg.thresholds.min_channels
        why = f"{working} working channel(s) < --min-channels {cfg.thresholds.min_channels}"
        records.append(Measurement(node, "channels", float(working), "channels", threshold=float(cfg.thresholds.min_channels),
                                   verdict=PASS if ok else FAIL, rule="" if ok else RULE_CHANNELS,
                                   reason="" if ok else why, extra={"pairs": [p.label() for p in plan.pairs]}))
        if not ok:
            reasons.append(f"switchbox: {why}")
        host = _host_records(node, figs, profile, cfg)
        records += host
        reasons += [f"switchbox: {r.reason}" for r in host if r.verdict == FAIL]
    for f in findings:
        verdict = {"fail": FAIL, "warn": "warn"}.get(f.severity, INFO)
        records.append(Measurement(node, f"nvml.{f.code}", f.value, "", gpu=f.gpu, link=f.link, expected=f.expected,
                                   verdict=verdict, reason=f.message, rule=RULE_HEALTH if verdict == FAIL else ""))
        if verdict == FAIL:
            reasons.append(f"gpu{f.gpu} {f.code}: {f.message}")
    return records, ("; ".join(reasons) or None)


@contextlib.contextmanager
def busy_links(gpus: list[int], size: int):
    """Keep host->GPU copies running while NVML reads the PCIe link state.

    An idle GPU drops to a lower PCIe generation to save power; reading
    under load tells a down-trained link from a resting one.
    """
    import torch

    stop = threading.Event()
    count = max(size // 4, 1)
    host = torch.ones(count, dtype=torch.float32, pin_memory=True)
    devs = [torch.empty(count, dtype=torch.float32, device=f"cuda:{g}") for g in gpus]

    def spin() -> None:
        while not stop.is_set():
            for d in devs:
                d.copy_(host, non_blocking=True)
            for g in gpus:
                torch.cuda.synchronize(g)

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    time.sleep(0.2)          # let the links train up
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


def run_switchbox(cfg: Config, reporter: Reporter) -> dict[str, Any]:
    """The whole switchbox check on this host; returns a fault-list document."""
    nvml: Any = ReplayNvml(cfg.box.nvml_replay) if cfg.box.nvml_replay else RealNvml()
    node = cfg.rdzv.node_name or socket.gethostname()
    plan = plan_box(nvml, cfg.box.box_pairs)
    nvml.watch_xid([g.index for g in plan.gpus])
    reporter.log(f"switchbox pairs ({plan.note}): " + (" ".join(f"{p.label()}({p.kind})" for p in plan.pairs)
                                                        or "none"))
    figs = BoxFigures(measured=False)
    try:
        import torch
        cuda = torch.cuda.is_available() and torch.cuda.device_count() >= len(plan.gpus) > 0
    except ImportError:
        cuda = False
    if cuda:
        figs = measure_box(plan, cfg)
    else:
        reporter.log("switchbox: no CUDA device visible: bandwidth not measured, NVML findings only")
    if cuda:
        with busy_links([g.index for g in plan.gpus], cfg.box.switchbox_size):
            findings = link_health(nvml, plan.gpus, under_load=True)
    else:
        findings = link_health(nvml, plan.gpus, under_load=False)
    profile = rules.select_profile(cfg.thresholds.profile, plan.gpus[0].name if plan.gpus else None)
    records, reason = judge_box(node, plan, figs, findings, cfg, profile)
    faulty = {node: reason} if reason else {}
    return faultlist.to_document(faulty, [r.to_dict() for r in records],
                                 switchbox={"pairs": [p.label() for p in plan.pairs], "note": plan.note,
                                            "groups": plan.groups, "measured": figs.measured,
                                            "nvml_source": getattr(nvml, "source", "live")})
