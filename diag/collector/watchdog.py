"""The collector's watchdog: evaluates the hang rules on a timer and acts.

One thread, one ``tick`` every --eval interval (0.5 s). The loop never dies:
each step is wrapped, errors are logged and the next tick runs. ``tick`` takes
the clock as arguments so tests can drive it directly.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from diag.collector import rules, verdict
from diag.collector.config import Config
from diag.collector.events import EventStore, HangEvent
from diag.collector.servicer import SessionRegistry
from diag.collector.state import JobState, Snapshot
from diag.pb import collector_pb2 as pb

log = logging.getLogger("diag.collector")


class Watchdog:
    """Owns the rule evaluation, hang declaration, dump requests and kills."""

    def __init__(self, config: Config, state: JobState, registry: SessionRegistry, events: EventStore,
                 out=None, timelines=None) -> None:
        self._config = config
        self.timelines = timelines  # diag.timeline.gather.TimelineGatherer, or None
        self._state = state
        self._registry = registry
        self._events = events
        self._out = out  # where verdict lines go; None means sys.stderr at print time
        self.detector = rules.HangDetector()
        self.declared: list[HangEvent] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stats_at: float | None = None
        self._stats_reports = 0
        self._drops_said = 0  # job-wide dropped-record total at the last DROPPED line

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="collector-watchdog", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for event in self._events.events():
            self._no_throw(event.flush, "writing hang.json", None, True)
        if self.timelines is not None:
            self._no_throw(self.timelines.close, "writing open timelines")

    def _loop(self) -> None:
        while not self._stop.wait(self._config.eval_interval_s):
            self._no_throw(self.tick, "evaluating the hang rules")

    @staticmethod
    def _no_throw(fn, doing: str, *args) -> None:
        try:
            fn(*args)
        except Exception:  # the watchdog must outlive any one bad tick
            log.exception("collector watchdog: error while %s; continuing", doing)

    def tick(self, now: float | None = None, now_unix: float | None = None) -> None:
        """One evaluation at monotonic ``now`` (wall clock ``now_unix``)."""
        now = time.monotonic() if now is None else now
        snap = self._state.snapshot(now)
        findings = rules.analyse(snap, self._config.hang_timeout_s, self._config.silent_after_s)
        fire, rearmed, newly_silent = self.detector.update(findings, snap)
        for agent in newly_silent:
            self._say(verdict.silent_line(agent))
        if rearmed:
            log.info("progress resumed: hang detection re-armed")
        if fire:
            self._declare(findings, snap, time.time() if now_unix is None else now_unix)
        self._log_stats(snap, now)
        self._report_drops(snap)
        if self.timelines is not None:
            self._no_throw(self.timelines.tick, "closing timeline requests", now)
        for event in self._events.events():
            self._no_throw(event.flush, "writing hang.json", now)
            if self._config.hang_action == "kill" and not event.killed:
                self._no_throw(self._maybe_kill, "sending KillWorkers", event, now)

    def _log_stats(self, snap: Snapshot, now: float) -> None:
        """Every --stats-interval: reports ingested so far and the rate since the last line."""
        if self._stats_at is None:
            self._stats_at = now
        if now - self._stats_at < self._config.stats_interval_s:
            return
        total = self._state.reports
        rate = (total - self._stats_reports) / (now - self._stats_at)
        log.info("ingest: %d reports total, %.1f/s over the last %.3f s; %d agents, %d ranks",
                 total, rate, now - self._stats_at, len(snap.agents), len(snap.ranks))
        self._stats_at, self._stats_reports = now, total

    def _report_drops(self, snap: Snapshot) -> None:
        """Say when ranks drop progress records (full rings), first at any drop
        and then each time the job-wide total doubles, so the line stays rare."""
        dropping = {r: e.progress.dropped_records for r, e in snap.ranks.items() if e.progress.dropped_records}
        total = sum(dropping.values())
        if total and total >= 2 * self._drops_said:
            self._say(verdict.dropped_line(dropping))
            self._drops_said = total

    def _declare(self, findings, snap: Snapshot, now_unix: float) -> None:
        event_id, path = self._events.reserve_dir(now_unix)
        doc = verdict.hang_document(findings, snap, job_id=self._config.job_id, event_id=event_id, event_dir=path,
                                    declared_unix=now_unix, timeout_s=self._config.hang_timeout_s)
        silent = set(findings.silent_ranks)
        expected = {r for r, e in snap.ranks.items() if r < findings.world_size and r not in silent}
        event = self._events.open_event(event_id, path, doc, expected, snap.now)
        self.declared.append(event)
        # Ask for stacks first: the stalled state is what we want on record,
        # and hang.json of a 16k-rank job takes a few hundred ms to write.
        sent = self._registry.broadcast(pb.Command(dump_stacks=pb.DumpStacks(event_id=event_id)))
        if self.timelines is not None:   # the agents answer it on a thread of its own
            self._no_throw(self.timelines.for_event, "asking for timelines", event_id, path, snap.now)
        self._say(doc["verdict"])
        event.flush(snap.now, force=True)
        log.info("event %s: asked %d agent(s) for stacks", event_id, sent)

    def _maybe_kill(self, event: HangEvent, now: float) -> None:
        timed_out = now - event.declared >= self._config.dump_timeout_s
        if not (timed_out or event.dumps_in(now)):
            return
        event.killed = True
        reason = f"hang {event.event_id}: --hang-action kill"
        sent = self._registry.broadcast(pb.Command(kill_workers=pb.KillWorkers(reason=reason)))
        log.warning("event %s: %s; sent KillWorkers to %d agent(s)%s", event.event_id,
                    "dump deadline passed" if timed_out and not event.dumps_in(now) else "stacks are in",
                    sent, "" if sent else " (none connected)")

    def _say(self, line: str) -> None:
        print(line, file=self._out or sys.stderr, flush=True)
