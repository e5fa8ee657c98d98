"""The agent's side of the gRPC Connect stream and UploadStacks.

One bidirectional stream: reports go out about every report_interval, commands
come back. When the collector is away the stream fails fast and is retried
with capped exponential backoff. Reports are built from the newest state when
gRPC asks for the next one, which is only once the previous one was sent: an
agent whose stream is blocked (a collector that is behind stops reading, flow
control stops us) holds no queue of stale reports, only the one being sent.

A collector that falls behind sends ReportPace (docs/collector.md, Scale):
report every ``interval_ms`` and the perf window with one report in
``perf_every``, within bounds (never faster than our own interval, never
slower than MAX_PACE_S); an empty one, or a new stream, is our own pace again.

Under --nodes-per-relay the collector may ask this agent to serve its group's
report relay (ServeRelay: report_relay.py) and tells the group to report
through it (RelayVia): the stream moves to the relay; only Connect does, the
uploads still go to the collector. The move half-closes the stream and waits
for the collector to end it, so the reports it has not read yet (it may be
seconds behind while a whole job moves) are read, not dropped. A relay that
cannot be reached or whose stream fails is left for RELAY_RETRY_S and the
agent reports directly again (said once); the collector sends it to a new
relay when there is one.

Before any call to a server (the collector, a relay) the agent runs the
handshake (diag/common/handshake.py): the server proves it holds the job
token before the agent sends anything that could be replayed, and the token
never goes on the wire. A collector address whose server fails the proof is
another process's: the agent says so in one line, stops
reporting and tells its launcher (``Agent.collector_untrusted``), which
stops the node. A relay that fails it is left like a relay that failed.
"""

from __future__ import annotations

import math
import threading
import time

import grpc

from diag.agent.report_relay import ReportRelay
from diag.common import envnames, handshake
from diag.pb import collector_pb2_grpc as pb_grpc

HEALTHY_AFTER = 10.0   # a stream that lived this long resets the backoff
MAX_PACE_S = 10.0      # the slowest report interval a collector may ask for
MAX_PERF_EVERY = 60
RELAY_RETRY_S = 60.0   # a relay that failed this agent is not taken again for this long
# A report gRPC has not taken this long: the stream is stuck (at 12,500 agents,
# a fifth of the streams opened in the connection storm never had a report
# read, their writes waiting on the transport for good). The agent ends the
# stream and connects again. Far above any wait the collector causes on
# purpose: a hang's declaring tick holds ingest for seconds, and a stream
# only waits once ~64 KiB of reports are unread.
STALLED_WRITE_S = 30.0
# A stream half-closed to move to the relay that the collector has not ended
# by then is cancelled: it is not reading (stuck, or gone).
MOVE_WAIT_S = 10.0


def next_due(sent_at: float, interval: float, paced_at: float) -> float:
    """When the report after one sent at ``sent_at`` is due, the pace having
    become ``interval`` at ``paced_at``: the first multiple of the interval
    after that report that is not before the change. A slower pace counts
    from the last report, as before; a quicker one keeps the agent's phase.
    Counted from the change instead, every agent whose last report was more
    than one new interval back would report at once: at 12,500 agents told
    together that the collector caught up, three in four, in a burst that
    put it behind again."""
    if paced_at <= sent_at:
        return sent_at + interval
    return sent_at + interval * max(1, math.ceil((paced_at - sent_at) / interval))


def bounded_pace(own_interval: float, perf_base: int, pace) -> tuple[float, int]:
    """(report interval, perf window every N reports) under a ReportPace
    (None or empty: our own): never faster than our own interval nor slower
    than MAX_PACE_S, the perf window no more often than ``perf_base``
    (RelayVia.perf_every through a relay, else 1) and at least every
    MAX_PERF_EVERY reports. bench/collector_ingest.py's agents obey it too."""
    interval = min(max(own_interval, (pace.interval_ms if pace else 0) / 1000), max(own_interval, MAX_PACE_S))
    every = min(max(perf_base, pace.perf_every if pace else 1), MAX_PERF_EVERY)
    return interval, every


class Connection:
    def __init__(self, config, agent):
        self.config = config
        self.agent = agent
        self._sessions = handshake.Sessions(config.token)
        self._channel = grpc.insecure_channel(config.collector)
        self._stub = pb_grpc.CollectorStub(self._channel)
        self._call = None
        self._call_lock = threading.Lock()
        # Events whose directory the collector refused (FAILED_PRECONDITION):
        # one line for the event, not one per rank and file, and no more sent.
        self._refused_events: set[str] = set()
        self.interval = config.report_interval   # as paced by the collector
        self.perf_every = 1
        self._paced_at = 0.0                      # when the pace last changed
        self.relay = ReportRelay(config, agent.log)   # the relay this agent serves, if asked
        self.via: str | None = None                   # the relay this agent reports through (RelayVia)
        self._via_channel: grpc.Channel | None = None
        self._via_failed: dict[str, float] = {}
        self._moving = False                          # the stream is being ended to move to the relay
        self._moving_at = 0.0
        self._perf_base = 1                           # RelayVia.perf_every while reporting through a relay
        self.stalled_write_s = STALLED_WRITE_S
        self._given_at: float | None = None           # when the report gRPC has not taken yet was given to it
        self._stalled = False                         # the stream was ended for a report never taken

    def run(self) -> None:
        """Connection thread body: stream, and on failure back off and retry."""
        backoff = self.config.backoff_min
        stop = self.agent.stopping
        while not stop.is_set():
            began = time.monotonic()
            via = self.via
            try:
                self._stream_once(via)
            except handshake.ImpostorError as exc:
                if via is None:   # fatal: never retried, never sent anything
                    self.agent.collector_untrusted(str(exc))
                    return
                self._leave_relay(via, exc)
                continue
            except grpc.RpcError as exc:
                if stop.is_set():   # close() cancelled it
                    return
                if self._moving:   # we ended it ourselves, to report through the relay
                    self._moving = False
                    continue
                stalled, self._stalled = self._stalled, False
                if via is not None:
                    self._leave_relay(via, exc, stalled)
                    continue       # straight back to the collector: no backoff
                if stalled:
                    self.agent.log(f"the collector at {self.config.collector} took no report for "
                                   f"{self.stalled_write_s:g} s: the stream is stuck; connecting again", every=0)
                else:
                    self._say_why(exc)
            except Exception as exc:
                self.agent.log(f"collector stream failed: {exc!r}")
            else:
                if self._moving:   # the collector read every report and ended the stream
                    self._moving = False
                    continue
            if via is not None and self.via == via and not stop.is_set():
                self._leave_relay(via, None)   # the relay ended the stream (it is going away)
                continue
            if time.monotonic() - began > HEALTHY_AFTER:
                backoff = self.config.backoff_min
            if stop.wait(backoff):
                return
            backoff = min(backoff * 2, self.config.backoff_max)

    def _stream_once(self, via: str | None) -> None:
        ended = threading.Event()
        stub = self._stub
        if via is not None:
            if self._via_channel is None:
                self._via_channel = grpc.insecure_channel(via)
            stub = pb_grpc.CollectorStub(self._via_channel)
        self._given_at, self._stalled = None, False
        address = via if via is not None else self.config.collector
        metadata = self._sessions.metadata(address, self._via_channel if via is not None else self._channel)
        call = stub.Connect(self._reports(ended), metadata=metadata)
        with self._call_lock:
            self._call = call
        self.pace(None)   # a new stream starts at our own pace
        threading.Thread(target=self._watch_writes, args=(call, ended), name="xpu-diag-stream-watch",
                         daemon=True).start()
        try:
            for command in call:
                which = command.WhichOneof("command")
                if which == "report_pace":
                    self.pace(command.report_pace)
                elif which == "serve_relay":
                    self.relay.serve(command.serve_relay)
                elif which == "relay_via":
                    self._move_to(command.relay_via.address, command.relay_via.perf_every, call)
                else:
                    self.agent.submit(command)
        finally:
            ended.set()
            with self._call_lock:
                self._call = None

    def _move_to(self, address: str, via_perf_every: int, call) -> None:
        """RelayVia: end this stream and report through ``address``, unless
        it failed us lately or is where we report already. Half-closed, not
        cancelled: a cancel drops the reports the collector has not read."""
        failed = self._via_failed.get(address)
        if not address or address == self.via or (failed is not None and time.monotonic() - failed < RELAY_RETRY_S):
            return
        self._drop_via_channel()
        self.via = address
        self._perf_base = max(1, via_perf_every)
        self._moving_at = time.monotonic()
        self._moving = True   # _reports ends, which half-closes the stream

    def _leave_relay(self, via: str, exc, stalled: bool = False) -> None:
        why = (f"it took no report for {self.stalled_write_s:g} s" if stalled
               else f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError)
               else str(exc) if exc is not None else "it ended the stream")
        self.agent.log(f"the report relay at {via} failed ({why}); reporting to the collector at "
                       f"{self.config.collector} directly", every=0)
        self._via_failed[via] = time.monotonic()
        self.via = None
        self._perf_base = 1
        self._drop_via_channel()

    def _drop_via_channel(self) -> None:
        if self._via_channel is not None:
            self._via_channel.close()
            self._via_channel = None

    def pace(self, pace) -> None:
        """Apply a ReportPace (None or empty: our own pace), within bounds;
        through a relay the perf window goes no more often than it asks."""
        own = self.config.report_interval
        interval, every = bounded_pace(own, self._perf_base, pace)
        if (interval, every) == (self.interval, self.perf_every):
            return
        if pace is not None:
            self.agent.log(f"the collector is behind: reporting every {interval:g} s, the perf window "
                           f"every {every} report(s)" if interval > own or every > self._perf_base
                           else "the collector caught up: reporting at our own pace", every=0)
        self._paced_at = time.monotonic()   # first: the report loop on another thread reads both
        self.interval, self.perf_every = interval, every

    def _reports(self, ended: threading.Event):
        stop = self.agent.stopping
        n = 0
        while not stop.is_set() and not ended.is_set() and not self._moving:
            try:
                report = self.agent.build_report(with_perf=n % self.perf_every == 0)
            except Exception as exc:  # never end the stream over one report
                self.agent.log(f"building a report failed: {exc!r}")
                report = None
            if report is not None:
                n += 1
                self._given_at = time.monotonic()
                yield report
                self._given_at = None   # gRPC took it: it asks for the next one only then
            sent_at = time.monotonic()
            while not ended.is_set() and not self._moving:   # a new pace is taken within 0.2 s (next_due)
                left = next_due(sent_at, self.interval, self._paced_at) - time.monotonic()
                if left <= 0 or stop.wait(min(left, 0.2)):
                    break
        if stop.is_set() and not ended.is_set():
            # A last report on the way out, so the collector sees the workers'
            # final state (exited: alive=false) rather than a silent agent.
            yield self.agent.build_report()

    def _watch_writes(self, call, ended: threading.Event) -> None:
        """End ``call`` if a report waits for gRPC longer than stalled_write_s,
        or the collector has not ended it MOVE_WAIT_S after a move began."""
        step = min(1.0, self.stalled_write_s / 4)
        while not ended.wait(step):
            given, now = self._given_at, time.monotonic()
            if given is not None and now - given > self.stalled_write_s:
                self._stalled = True
                call.cancel()
                return
            if self._moving and now - self._moving_at > MOVE_WAIT_S:
                call.cancel()
                return

    def _say_why(self, exc: grpc.RpcError) -> None:
        code = exc.code() if hasattr(exc, "code") else None
        if code == grpc.StatusCode.CANCELLED and self.agent.stopping.is_set():
            return
        if code == grpc.StatusCode.UNAUTHENTICATED:
            self._sessions.forget(self.config.collector)   # ran out: a new handshake on the next try
            self.agent.log(f"the collector at {self.config.collector} refused this agent's job "
                           f"token ({envnames.JOB_TOKEN} must be the same on every node)")
        else:
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            self.agent.log(f"collector at {self.config.collector} unreachable "
                           f"({code.name if code else 'error'}: {detail}); retrying")

    def _metadata(self):
        """The collector's session metadata (a handshake when none is held);
        raises as handshake.Sessions.metadata."""
        return self._sessions.metadata(self.config.collector, self._channel)

    def _refused(self, exc) -> None:
        if isinstance(exc, grpc.RpcError) and exc.code() == grpc.StatusCode.UNAUTHENTICATED:
            self._sessions.forget(self.config.collector)

    def upload(self, dump) -> bool:
        """UploadStacks with a timeout and a few retries; never raises. The
        collector's refusal of the event's directory (FAILED_PRECONDITION:
        another user's link) holds for every rank's file: it is said once and
        the event's other stacks are not sent. A file that did not fit
        (RESOURCE_EXHAUSTED: a full disk, a dump over --max-dump-size) is
        that file's: it is not tried again, the others are sent."""
        if dump.event_id in self._refused_events:
            return False
        what = f"stacks of rank {dump.rank}"
        return self._unary("UploadStacks", dump, 30, 3, 1.0, f"{what} not uploaded", f"uploading {what} failed",
                           refused=f"collector refused {what}", final=lambda exc: self._event_refused(dump, exc))

    def _event_refused(self, dump, exc) -> None:
        with self._call_lock:
            first = dump.event_id not in self._refused_events
            self._refused_events.add(dump.event_id)
        if first:
            detail = exc.details() if hasattr(exc, "details") else ""
            self.agent.log(f"uploading the stacks of event {dump.event_id} failed: {exc.code().name}: {detail}; "
                           f"this node sends no more of them", every=0)

    def upload_timeline(self, upload) -> bool:
        """UploadTimeline once, with a timeout; never raises. Not retried: the
        collector closes the request at its deadline anyway."""
        return self._unary("UploadTimeline", upload, 30, 1, 0.0, "the timeline not uploaded",
                           "uploading the timeline failed", refused="collector refused the timeline", details=True)

    def report_last_words(self, done) -> bool:
        """ReportLastWords with a timeout and one retry; never raises (the
        collector kills at its deadline without it)."""
        return self._unary("ReportLastWords", done, 10, 2, 0.5, f"last words of {done.event_id} not answered",
                           f"answering last words of {done.event_id} failed")

    def _unary(self, method: str, request, timeout_s: float, tries: int, pause_s: float, not_sent: str,
               failed: str, refused: str | None = None, details: bool = False, final=None) -> bool:
        """The ``ok`` of the collector's reply to one unary call, tried up to
        ``tries`` times (``pause_s`` times the try's number apart) until the
        agent stops; never raises. False when unanswered: logged as
        "<not_sent>: <why>" for an impostor, "<failed>: <code>" (and the
        details with ``details``) when the last try failed; with ``refused``,
        a reply that is not ok is logged as "<refused>: <its message>";
        with ``final``, a FAILED_PRECONDITION is handed to it, untried again."""
        for attempt in range(tries):
            try:
                ack = getattr(self._stub, method)(request, metadata=self._metadata(), timeout=timeout_s)
                if refused is not None and not ack.ok:
                    self.agent.log(f"{refused}: {ack.message}", every=0)
                return ack.ok
            except handshake.ImpostorError as exc:
                self.agent.log(f"{not_sent}: {exc}", every=0)
                return False
            except grpc.RpcError as exc:
                self._refused(exc)
                if final is not None and exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                    final(exc)
                    return False
                # no room now is no room a second later: said, not tried again
                if attempt == tries - 1 or self.agent.stopping.is_set() or \
                        exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    detail = ""
                    if details:
                        detail = " " + (exc.details() if hasattr(exc, "details") else "")
                    self.agent.log(f"{failed}: {exc.code().name}{detail}", every=0)
                    return False
                time.sleep(pause_s * (attempt + 1))
        return False

    def close(self) -> None:
        with self._call_lock:
            if self._call is not None:
                self._call.cancel()
        self._channel.close()
        self._drop_via_channel()
        self.relay.stop()
