"""The Collector gRPC service: agents' Connect streams and stack uploads.

Each Connect stream is served by one pool thread, which reads a report,
ingests it, then sends any commands queued for that agent. So a command
reaches an agent at its next report, within one report interval (about 1 s),
and a thousand agents cost a thousand threads, not two thousand.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

import grpc

from diag.collector.config import Config
from diag.collector.events import EventStore, UploadError
from diag.collector.state import JobState, ReportError
from diag.pb import collector_pb2 as pb
from diag.pb import collector_pb2_grpc as pb_grpc

log = logging.getLogger("diag.collector")
QUIET_ABOVE_AGENTS = 32


class AgentSession:
    """One connected agent; ``commands`` is drained by its stream's thread."""

    def __init__(self, node_rank: int, hostname: str, agent_pid: int) -> None:
        self.node_rank = node_rank
        self.hostname = hostname
        self.agent_pid = agent_pid
        self.commands: collections.deque[pb.Command] = collections.deque()


class SessionRegistry:
    """The agents connected now, by node rank (a reconnect replaces the old one)."""

    def __init__(self, max_agents: int) -> None:
        self._sessions: dict[int, AgentSession] = {}
        self._lock = threading.Lock()
        self._max = max_agents

    def add(self, session: AgentSession) -> bool:
        with self._lock:
            if session.node_rank not in self._sessions and len(self._sessions) >= self._max:
                return False
            self._sessions[session.node_rank] = session
            return True

    def remove(self, session: AgentSession) -> None:
        with self._lock:
            if self._sessions.get(session.node_rank) is session:
                del self._sessions[session.node_rank]

    def broadcast(self, command: pb.Command) -> int:
        """Queue ``command`` for every connected agent; returns how many."""
        with self._lock:
            sessions = list(self._sessions.values())
        for s in sessions:
            s.commands.append(command)
        return len(sessions)

    def node_ranks(self) -> list[int]:
        with self._lock:
            return list(self._sessions)

    def __len__(self) -> int:
        return len(self._sessions)


class CollectorServicer(pb_grpc.CollectorServicer):
    def __init__(self, config: Config, state: JobState, registry: SessionRegistry, events: EventStore,
                 timelines=None) -> None:
        self._config = config
        self._state = state
        self._registry = registry
        self._events = events
        self._timelines = timelines   # diag.timeline.gather.TimelineGatherer

    def Connect(self, request_iterator, context):
        context.send_initial_metadata(())
        session = None
        try:
            for report in request_iterator:
                if session is None:
                    session = self._open(report, context)
                try:
                    self._state.ingest(report, time.monotonic())
                except ReportError as exc:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad NodeReport: {exc}")
                while session.commands:
                    yield session.commands.popleft()
        except grpc.RpcError:
            pass  # the agent went away; unless it comes back, its ranks turn silent
        finally:
            if session is not None:
                self._close(session)

    def _open(self, report: pb.NodeReport, context) -> AgentSession:
        if report.job_id and report.job_id not in (self._config.job_id, self._config.safe_job_id):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"report for job {report.job_id[:64]!r}, but this collector serves job {self._config.job_id!r}")
        session = AgentSession(report.node_rank, report.hostname, report.agent_pid)
        if not self._registry.add(session):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"collector already serves {self._config.max_agents} agents (--max-agents)")
        log.log(self._level(), "agent connected: node %d (%s, pid %d)", report.node_rank, report.hostname,
                report.agent_pid)
        return session

    def _close(self, session: AgentSession) -> None:
        self._registry.remove(session)
        self._state.agent_left(session.node_rank, session.agent_pid)
        log.log(self._level(), "agent disconnected: node %d (%s, pid %d)", session.node_rank, session.hostname,
                session.agent_pid)

    def _level(self) -> int:
        """One line per agent for small jobs; a 2,000-node job would drown its log."""
        return logging.INFO if len(self._registry) <= QUIET_ABOVE_AGENTS else logging.DEBUG

    def GetPerfView(self, request, context):
        """Every rank's latest window, as its agent last sent it: the state
        already holds the reports, so ingest pays nothing for this view."""
        snap = self._state.snapshot(time.monotonic())
        view = pb.PerfView(job_id=self._config.job_id)
        for rank in sorted(snap.ranks):
            entry = snap.ranks[rank]
            if not entry.progress.HasField("perf"):
                continue
            agent = snap.agents.get(entry.node_rank)
            view.ranks.add(rank=rank, local_rank=entry.progress.local_rank,
                           node_rank=entry.node_rank, hostname=agent.hostname if agent else "",
                           age_s=max(0.0, snap.now - entry.received), perf=entry.progress.perf,
                           gpu=entry.progress.gpu.identity if entry.progress.HasField("gpu") else None)
        return view

    def UploadStacks(self, request, context):
        try:
            name = self._events.accept_upload(request, time.monotonic())
        except UploadError as exc:
            context.abort(exc.code, exc.message)
        except OSError as exc:
            log.error("cannot write stack dump for rank %d of event %s: %s", request.rank, request.event_id[:64], exc)
            context.abort(grpc.StatusCode.INTERNAL, f"collector cannot write the dump: {exc.strerror}")
        return pb.Ack(ok=True, message=name)

    def ReportLastWords(self, request, context):
        """An agent's answer to PersistLastWords (--hang-action kill/recover waits for them)."""
        try:
            self._events.accept_last_words(request)
        except UploadError as exc:
            context.abort(exc.code, exc.message)
        return pb.Ack(ok=True)

    def UploadTimeline(self, request, context):
        if self._timelines is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "this collector keeps no timelines")
        try:
            spans = self._timelines.accept_upload(request)
        except UploadError as exc:
            context.abort(exc.code, exc.message)
        return pb.Ack(ok=True, message=f"{spans} spans")

    def GetTimeline(self, request, context):
        if self._timelines is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "this collector keeps no timelines")
        wait_s = request.wait_ms / 1000 if request.wait_ms else None
        if wait_s is not None and not 0 < wait_s <= 600:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"wait_ms {request.wait_ms} is not in 1..600000")
        try:
            data, ranks, missing = self._timelines.on_demand(request.last_ns, wait_s)
        except UploadError as exc:
            context.abort(exc.code, exc.message)
        return pb.TimelineReply(trace_json=data, ranks=ranks, nodes_missing=missing)
