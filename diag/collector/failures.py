"""The FAILED verdict's process glue: when a rank's exit breaks the job (docs/collector.md, "On a failure").

The judging is diag/failure's (pure). This watch runs it on the job's latest
reports when reports of exited ranks come in (at most once a second), and on
the first failure it finds opens an event: the directory, DumpStacks to every
agent while some rank still lives (the stacks of the ranks left waiting, as
for a hang) and failure.json. As the ranks' statuses arrive (their launchers
learn them from torchrun once it returns) the verdict is judged again and
failure.json rewritten (temp + rename); the collector's stop judges a last
time. The launcher's closing summary says the verdict line.

A job that xpu-diag's own --hang-action killed is not judged: those exits are
the kill's, not a crash.
"""

from __future__ import annotations

import logging

from diag.common import dumpnames
from diag.failure import judge as failure_judge
from diag.pb import collector_pb2 as pb

log = logging.getLogger("diag.collector")
JUDGE_EVERY_S = 1.0


class FailureWatch:
    def __init__(self, config, state, events, registry, killed) -> None:
        """``killed()``: whether a KillWorkers of ours went out (a hang event's)."""
        self._config = config
        self._state = state
        self._events = events
        self._registry = registry
        self._killed = killed
        self._seen = 0
        self._at = float("-inf")
        self.event = None             # the HangEvent holding failure.json, once a failure was found
        self._alive: list[int] = []   # ranks alive when it was found: their stacks were asked for
        self.verdict = ""

    def tick(self, now: float, unix: float) -> None:
        seen = self._state.exit_reports
        if seen == self._seen or now - self._at < JUDGE_EVERY_S:
            return
        self._seen, self._at = seen, now
        self.judge(self._state.snapshot(now), unix)

    def final(self, now: float, unix: float) -> None:
        """At the collector's stop: the last reports (with the statuses)
        judged, and the verdict said once in the collector's log."""
        if self._state.exit_reports != self._seen:
            self._seen = self._state.exit_reports
            self.judge(self._state.snapshot(now), unix)
        if self.verdict:
            log.info("event %s: %s", self.event.event_id, self.verdict)

    def judge(self, snap, unix: float) -> None:
        if self._killed():
            return
        ranks = {r: e.progress for r, e in snap.ranks.items() if r < snap.world_size}
        failure = failure_judge.judge(ranks)
        if failure is None:
            return
        if self.event is None:
            self._open(ranks, snap, unix)
        event = self.event
        verdict = failure_judge.line(failure, event.path, bool(self._alive))
        doc = failure_judge.document(failure, ranks, job_id=self._config.job_id, event_id=event.event_id,
                                     world_size=snap.world_size, declared_unix=event.declared_unix,
                                     verdict=verdict, alive_at_failure=self._alive)
        event.replace_doc(doc)
        if verdict != self.verdict:   # said at the stop: the statuses come in last
            self.verdict = verdict
            log.debug("event %s: %s", event.event_id, verdict)

    def _open(self, ranks, snap, unix: float) -> None:
        event_id, path = self._events.reserve_dir(unix)
        self._alive = sorted(r for r, p in ranks.items() if p.alive)
        doc = {"version": failure_judge.VERSION, "job_id": self._config.job_id, "event_id": event_id,
               "declared_unix": unix, "world_size": snap.world_size}
        self.event = self._events.open_event(event_id, path, doc, set(self._alive), snap.now,
                                             doc_name=dumpnames.FAILURE_JSON)
        self.event.stacks_said = not self._alive   # no STACKS line for stacks nobody was asked for
        if self._alive:   # the ranks still waiting, as for a hang; an exited rank gets its "gone" note
            sent = self._registry.broadcast(pb.Command(dump_stacks=pb.DumpStacks(event_id=event_id)))
            log.info("event %s: a rank's exit broke the job; asked %d agent(s) for stacks", event_id, sent)
