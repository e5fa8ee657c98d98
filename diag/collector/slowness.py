"""The collector's slow-rank watch: the perf view -> SLOW lines and event dirs.

Runs on the watchdog's thread, every few seconds rather than every tick: the
rules read every rank's window, and the window moves slowly. The judging is
``diag.slow`` (pure); this module only gathers the windows and acts, the way
the watchdog does for hangs: one line, ``<timeline>/<job>/<event>/slow.json``,
and with ``--slow-action dump`` the stacks of the slow rank and of one
healthy rank.
"""

from __future__ import annotations

import json
import logging
import os

from diag.collector import gpus
from diag.collector.config import Config
from diag.collector.events import EventStore
from diag.collector.servicer import SessionRegistry
from diag.collector.state import Snapshot
from diag.common import dumpnames, safe_dirs
from diag.common.ranks import fold
from diag.pb import collector_pb2 as pb
from diag.slow import windows as slow_windows
from diag.slow.api import RULE_SLOW_LINK, RULE_STRAGGLER, RankWindow, SlowEvent, Thresholds
from diag.slow.detector import SlowDetector

log = logging.getLogger("diag.collector")
# A rank whose perf view is older than this is not judged (its agent is slow or gone).
STALE_AFTER_S = 5.0
SLOW_DOC = dumpnames.SLOW_JSON
PAUSE_EVERY = 500   # ranks: ~20 ms of windows between two pauses


class SlowWatch:
    def __init__(self, config: Config, events: EventStore, registry: SessionRegistry, say,
                 timelines=None) -> None:
        self._config = config
        self._timelines = timelines   # diag.collector.timelines.TimelineGatherer, or None
        self._events = events
        self._registry = registry
        self._say = say
        self.thresholds = Thresholds(window_s=config.perf_window_s, slow=config.slow_threshold)
        self.detector = SlowDetector(self.thresholds)
        self.every_s = max(2.0, config.perf_window_s / 12)
        self._next = 0.0
        self.declared: list[tuple[str, dict]] = []

    def tick(self, snap: Snapshot, now_unix: float, hanging: bool, pause=None) -> None:
        """Judge the view if it is time; a job that hangs is not also slow.
        ``pause``: called between chunks of ranks (watchdog.GilShare)."""
        if snap.now < self._next:
            return
        # reading every rank's window costs ~35 us a rank: big jobs are judged less often
        self._next = snap.now + max(self.every_s, len(snap.ranks) / 2000)
        if hanging:
            return
        for event in self.detector.update(snap.now, windows_of(snap, pause)):
            self._declare(event, snap, now_unix)
        for finding in self.detector.recovered:
            log.info("slow: ranks %s recovered (%s): the verdict is re-armed", fold(finding.ranks), finding.rule)

    def _declare(self, event: SlowEvent, snap: Snapshot, now_unix: float) -> None:
        event_id, path = self._events.reserve_dir(now_unix)
        doc = slow_document(event, self._config, event_id, path, now_unix, snap.world_size, snap)
        if self._timelines is not None:   # the window the verdict was judged on, as far as the rings hold it
            self._timelines.request(event_id, snap.now, int(self._config.perf_window_s * 1e9), event_path=path)
        if self._config.slow_action == "dump":
            ranks = sorted(set(event.finding.ranks) | set(_one_healthy(event, snap)))
            opened = self._events.open_event(event_id, path, doc, set(ranks), snap.now, doc_name=SLOW_DOC)
            self._registry.broadcast(pb.Command(dump_stacks=pb.DumpStacks(event_id=event_id, ranks=ranks)))
            opened.flush(snap.now, force=True)
        else:
            try:
                safe_dirs.write_file(os.path.join(path, SLOW_DOC), json.dumps(doc, indent=1).encode())
            except OSError as exc:   # the SLOW line is said all the same
                safe_dirs.say_once(log.warning, exc)
        self.declared.append((event_id, doc))
        self._say(doc["verdict"])


def windows_of(snap: Snapshot, pause=None) -> dict[int, RankWindow]:
    """Every live rank's window, as fresh as its last report. ``pause`` is
    called every PAUSE_EVERY ranks: at 100,000 ranks this takes seconds."""
    out = {}
    for i, (rank, entry) in enumerate(snap.ranks.items()):
        if pause is not None and i % PAUSE_EVERY == PAUSE_EVERY - 1:
            pause()
        progress, perf = entry.progress, entry.perf   # the latest window (agents that pace send it less often)
        if (not progress.alive or perf is None or perf.window_s <= 0
                or snap.now - entry.received > STALE_AFTER_S):
            continue
        agent = snap.agents.get(entry.node_rank)
        names = {c.comm_id: c.group_name for c in progress.comms if c.group_name}
        out[rank] = slow_windows.from_perf(
            rank, entry.node_rank, progress.local_rank, agent.hostname if agent else "", perf,
            lambda comm_id: f'"{names[comm_id]}"' if comm_id in names else slow_windows.group_name(comm_id))
    return out


def _one_healthy(event: SlowEvent, snap: Snapshot) -> list[int]:
    """A rank to compare stacks with: the lowest one not named."""
    named = set(event.finding.ranks)
    healthy = [r for r in sorted(event.windows[0]) if r not in named] if event.windows else []
    return healthy[:1]


def verdict_line(event: SlowEvent, windows: dict[int, RankWindow], window_s: float, path: str,
                 snap: Snapshot | None = None) -> str:
    """The SLOW line; with ``snap``, the rank's physical GPU and, for a rank
    named slow, the NVML cause (or "no throttle reported"), docs/gpu.md."""
    f = event.finding
    cause = ""
    if f.rule == RULE_SLOW_LINK:
        who = f"ranks {fold(f.ranks)} (a slow link)"
    else:
        w = windows.get(f.ranks[0])
        where = ""
        if w is not None:
            where = (f" ({gpus.where(snap, w.rank, w.node_rank, w.local_rank)})" if snap is not None
                     else f" (node {w.node_rank}, local rank {w.local_rank})")
        who = f"rank {f.ranks[0]}{where}" + (" is the straggler:" if f.rule == RULE_STRAGGLER else "")
        cause = gpus.slow_cause(snap, f.ranks[0]) if snap is not None else ""
    return f"SLOW: {who} {f.detail} over {window_s:g} s{'; ' + cause if cause else ''}; details in {path}/"


def slow_document(event: SlowEvent, config: Config, event_id: str, path: str, now_unix: float,
                  world_size: int, snap: Snapshot | None = None) -> dict:
    f = event.finding
    windows = event.windows[0] if event.windows else {}
    th = config.perf_window_s
    return {
        "version": 1, "kind": "slow", "job_id": config.job_id, "event_id": event_id, "world_size": world_size,
        "declared_unix": now_unix, "verdict": verdict_line(event, windows, th, path, snap),
        "rule": f.rule, "ranks": list(f.ranks), "comm_id": f.comm_id, "figure": f.figure,
        "reference": f.reference, "unit": f.unit, "deviation": round(f.deviation, 4), "detail": f.detail,
        "held_s": round(event.declared - event.since, 3), "window_s": config.perf_window_s,
        "thresholds": {"slow": config.slow_threshold, "action": config.slow_action},
        "per_rank": [dict(_rank_doc(w), gpu=_gpu_doc(snap, w.rank)) for _, w in sorted(windows.items())],
    }


def _gpu_doc(snap: Snapshot | None, rank: int) -> dict | None:
    """slow.json's per-rank ``gpu``: the identity and the NVML sample the cause was read from."""
    health = gpus.health_of(snap, rank) if snap is not None else None
    if health is None:
        return None
    out = health.identity.to_dict()
    if health.latest is not None:
        s = health.latest
        out.update(throttle_reasons=s.throttle_reasons, sm_clock_mhz=s.sm_clock_mhz,
                   sm_clock_max_mhz=s.sm_clock_max_mhz, temperature_c=s.temperature_c, power_w=s.power_w,
                   throttled_since_unix=health.throttled_since_unix_s or None)
    return out


def _rank_doc(w: RankWindow) -> dict:
    return {
        "rank": w.rank, "node_rank": w.node_rank, "local_rank": w.local_rank, "hostname": w.hostname,
        "span_s": round(w.span_s, 3), "gemm_tflops": w.gemm_tflops and round(w.gemm_tflops, 2),
        "gemm_samples": w.gemm_samples, "steps": w.steps, "gc_s": round(w.gc_s, 3),
        "launches_per_s": round(w.launches_per_s, 1),
        "comms": [{"comm_id": c.comm_id, "group": c.comm_name, "op": c.op, "count": c.count,
                   "wait_s": round(c.wait_s, 4), "wait_share": round(c.wait_s / w.span_s, 4) if w.span_s else None,
                   "typical_s": c.typical_s, "busbw_bps": c.busbw_bps, "bytes_per_op": c.bytes_per_op}
                  for c in w.comms],
    }
