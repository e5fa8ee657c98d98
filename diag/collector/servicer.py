"""The Collector gRPC service (``grpc.aio``): agents' Connect streams and uploads.

All streams are served by one asyncio event loop, with no thread per stream
(a thread per stream topped out near 2,500 agents). A stream's
handler reads and ingests reports; a small writer task per stream pushes the
commands queued for its agent as soon as they are queued (``broadcast`` may be
called from any thread: it wakes the writers through the loop). Work that may
block (writing dump files, waiting for timelines, copying the perf view of a
big job) runs in a thread pool, never on the loop.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time

import grpc

from diag.collector.config import Config
from diag.collector.events import EventStore, UploadError
from diag.collector.relay_board import ADVISE_EVERY_S
from diag.collector.state import AgentClock, JobState, ReportError
from diag.pb import collector_pb2 as pb
from diag.pb import collector_pb2_grpc as pb_grpc

log = logging.getLogger("diag.collector")
QUIET_ABOVE_AGENTS = 32


class AgentSession:
    """One connected agent. ``commands`` is what is queued for it; the
    stream's writer drains it when woken (``wake``, set on the loop)."""

    def __init__(self, node_rank: int, hostname: str, agent_pid: int) -> None:
        self.node_rank = node_rank
        self.hostname = hostname
        self.agent_pid = agent_pid
        self.commands: collections.deque[pb.Command] = collections.deque()
        self.clock = AgentClock()
        self.wake: asyncio.Event | None = None   # set by the stream's handler, on the loop
        self.advise_at = 0.0   # reporting directly under --nodes-per-relay: when to look at its group's relay next


class SessionRegistry:
    """The agents connected now, by node rank (a reconnect replaces the old one)."""

    def __init__(self, max_agents: int) -> None:
        self._sessions: dict[int, AgentSession] = {}
        self._lock = threading.Lock()
        self._max = max_agents
        self.loop: asyncio.AbstractEventLoop | None = None   # the server's loop, once serving
        self.pace: pb.Command | None = None   # the ReportPace in force (pace.py), sent to newcomers too
        self.gate: asyncio.Event | None = None   # set: streams read reports; cleared: ingest paused (hold)

    def hold(self, on: bool) -> None:
        """Pause (True) or resume ingest, from any thread. While the watchdog
        judges a hang, reports wait in gRPC's buffers instead of taking the
        GIL from it: their ages stay right (sent_mono_ns), and the HANG line
        of a 16,000-rank job comes in one second, not ten."""
        loop, gate = self.loop, self.gate
        if loop is None or gate is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(gate.clear if on else gate.set)
        except RuntimeError:   # the loop closed meanwhile
            pass

    def add(self, session: AgentSession) -> bool:
        with self._lock:
            if session.node_rank not in self._sessions and len(self._sessions) >= self._max:
                return False
            self._sessions[session.node_rank] = session
            return True

    def remove(self, session: AgentSession) -> bool:
        """False when a newer session of the same node replaced it (the agent
        moved to a relay, or reconnected before the old stream ended)."""
        with self._lock:
            if self._sessions.get(session.node_rank) is session:
                del self._sessions[session.node_rank]
                return True
            return False

    def broadcast(self, command: pb.Command) -> int:
        """Queue ``command`` for every connected agent and wake their writers
        (one hop onto the loop for all of them); returns how many."""
        with self._lock:
            sessions = list(self._sessions.values())
        for s in sessions:
            s.commands.append(command)
        loop = self.loop
        if loop is not None and sessions and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(_wake_all, sessions)
            except RuntimeError:   # the loop closed meanwhile: the server is stopping
                pass
        return len(sessions)

    def node_ranks(self) -> list[int]:
        with self._lock:
            return list(self._sessions)

    def __len__(self) -> int:
        return len(self._sessions)


def _wake_all(sessions) -> None:
    for s in sessions:
        if s.wake is not None:
            s.wake.set()


class CollectorServicer(pb_grpc.CollectorServicer):
    def __init__(self, config: Config, state: JobState, registry: SessionRegistry, events: EventStore,
                 timelines=None, pool=None) -> None:
        self._config = config
        self._state = state
        self._registry = registry
        self._events = events
        self._timelines = timelines   # diag.collector.timelines.TimelineGatherer
        self._pool = pool             # concurrent.futures executor for blocking work (None: the loop's default)
        self.streams: collections.Counter = collections.Counter()   # how Connect streams ended (logs, bench)
        self.relays = None   # diag.collector.relay_board.RelayBoard under --nodes-per-relay
        self.hang_marks = dict   # () -> {rank: "hung" | "culprit"} while a hang lasts (Watchdog.hang_marks)

    async def _blocking(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def Connect(self, request_iterator, context):
        await context.send_initial_metadata(())
        session, writer, how = None, None, "cancelled"
        try:
            gate = self._registry.gate
            while True:   # context.read(), not the request iterator: one async layer less a report
                if session is not None and gate is not None and not gate.is_set():
                    await gate.wait()   # a newcomer's first report still registers it (the HANG asks it too)
                report = await context.read()
                if report is grpc.aio.EOF:
                    break
                now = time.monotonic()
                if session is not None and gate is not None and not gate.is_set():
                    await gate.wait()   # read as the hold began (every stream has a read pending): it waits too
                if session is None:
                    session = await self._open(report, context)
                    writer = asyncio.ensure_future(self._push(session, context))
                try:
                    self._state.ingest(report, now, session.clock)
                except ReportError as exc:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad NodeReport: {exc}")
                if self.relays is not None and now >= session.advise_at:
                    self._advise(session, now)
            how = "ended"
        except Exception as exc:
            how = type(exc).__name__
            raise
        finally:
            self.streams[how] += 1
            if writer is not None:
                writer.cancel()
            if session is not None:
                self._close(session)

    def _advise(self, session: AgentSession, now: float) -> None:
        """--nodes-per-relay: a directly reporting agent serves its group's
        relay, or reports through it (relay_board.py)."""
        session.advise_at = now + ADVISE_EVERY_S
        command = self.relays.advice(session.node_rank, now)
        if command is not None:
            session.commands.append(command)
            session.wake.set()

    async def _push(self, session: AgentSession, context) -> None:
        """The stream's writer: commands go out as soon as they are queued,
        in order (a KillWorkers never overtakes the DumpStacks before it)."""
        try:
            while True:
                while session.commands:
                    await context.write(session.commands.popleft())
                await session.wake.wait()
                session.wake.clear()
        except asyncio.CancelledError:
            raise
        except Exception:   # the stream ended under the write: the handler cleans up
            return

    async def _open(self, report: pb.NodeReport, context) -> AgentSession:
        session, refused = self.open_session(report, asyncio.Event())
        if refused is not None:
            await context.abort(*refused)
        return session

    def open_session(self, report: pb.NodeReport, wake: asyncio.Event) -> tuple:
        """A stream's first report: (session, None), or (None, (code, message))
        when it is refused. ``wake`` is what wakes the stream's writer (its
        own, or an ingest process's link: ingest_link.py). On the loop."""
        if report.job_id and report.job_id not in (self._config.job_id, self._config.safe_job_id):
            return None, (grpc.StatusCode.FAILED_PRECONDITION,
                          f"report for job {report.job_id[:64]!r}, but this collector serves job "
                          f"{self._config.job_id!r}")
        session = AgentSession(report.node_rank, report.hostname, report.agent_pid)
        session.wake = wake
        if not self._registry.add(session):
            return None, (grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"collector already serves {self._config.max_agents} agents (--max-agents)")
        if self._registry.pace is not None:   # the collector is behind: this agent paces too
            session.commands.append(self._registry.pace)
        log.log(self._level(), "agent connected: node %d (%s, pid %d)", report.node_rank, report.hostname,
                report.agent_pid)
        return session, None

    def close_session(self, session: AgentSession) -> None:
        self._close(session)

    def _close(self, session: AgentSession) -> None:
        if self._registry.remove(session):   # not when its agent already came back on a newer stream
            self._state.agent_left(session.node_rank, session.agent_pid)
        log.log(self._level(), "agent disconnected: node %d (%s, pid %d)", session.node_rank, session.hostname,
                session.agent_pid)

    def _level(self) -> int:
        """One line per agent for small jobs; a 2,000-node job would drown its log."""
        return logging.INFO if len(self._registry) <= QUIET_ABOVE_AGENTS else logging.DEBUG

    async def GetPerfView(self, request, context):
        return await self._blocking(self._perf_view)

    def _perf_view(self) -> pb.PerfView:
        """Every rank's latest window, as its agent last sent it (in a thread:
        copying 100,000 ranks' windows must not hold up the reports)."""
        snap = self._state.snapshot(time.monotonic())
        view = pb.PerfView(job_id=self._config.job_id)
        marks = self.hang_marks()
        for rank in sorted(snap.ranks):
            entry = snap.ranks[rank]
            if entry.perf is None:
                continue
            agent = snap.agents.get(entry.node_rank)
            row = view.ranks.add(rank=rank, local_rank=entry.progress.local_rank,
                                 node_rank=entry.node_rank, hostname=agent.hostname if agent else "",
                                 age_s=max(0.0, snap.now - entry.perf_at), perf=entry.perf,
                                 gpu=entry.progress.gpu.identity if entry.progress.HasField("gpu") else None,
                                 verdict=marks.get(rank, ""))
            _add_in_flight(row, entry, snap.now)
        return view

    async def UploadStacks(self, request, context):
        try:
            name = await self._blocking(self._events.accept_upload, request, time.monotonic())
        except UploadError as exc:
            await context.abort(exc.code, exc.message)
        except OSError as exc:
            log.error("cannot write stack dump for rank %d of event %s: %s", request.rank, request.event_id[:64], exc)
            await context.abort(grpc.StatusCode.INTERNAL, f"collector cannot write the dump: {exc.strerror}")
        return pb.Ack(ok=True, message=name)

    async def ReportLastWords(self, request, context):
        """An agent's answer to PersistLastWords (--hang-action kill/recover waits for them)."""
        try:
            self._events.accept_last_words(request)
        except UploadError as exc:
            await context.abort(exc.code, exc.message)
        return pb.Ack(ok=True)

    async def UploadTimeline(self, request, context):
        if self._timelines is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this collector keeps no timelines")
        try:
            spans = await self._blocking(self._timelines.accept_upload, request)
        except UploadError as exc:
            await context.abort(exc.code, exc.message)
        return pb.Ack(ok=True, message=f"{spans} spans")

    async def GetTimeline(self, request, context):
        if self._timelines is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this collector keeps no timelines")
        wait_s = request.wait_ms / 1000 if request.wait_ms else None
        if wait_s is not None and not 0 < wait_s <= 600:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"wait_ms {request.wait_ms} is not in 1..600000")
        try:   # waits for the agents' answers: in a thread, never on the loop
            data, ranks, missing = await self._blocking(self._timelines.on_demand, request.last_ns, wait_s)
        except UploadError as exc:
            await context.abort(exc.code, exc.message)
        return pb.TimelineReply(trace_json=data, ranks=ranks, nodes_missing=missing)


def _add_in_flight(row: pb.PerfRankView, entry, now: float) -> None:
    """The rank's oldest op in flight, aged to ``now`` (the report was built
    ``now - entry.received`` ago), and its group by the HANG line's name."""
    progress = entry.progress
    if not progress.alive or not progress.HasField("oldest_in_flight"):
        return
    row.in_flight.CopyFrom(progress.oldest_in_flight)
    row.in_flight.age_ns += int(max(0.0, now - entry.received) * 1e9)
    op = progress.oldest_in_flight
    if op.kind in (pb.OP_KIND_COLLECTIVE, pb.OP_KIND_P2P):
        row.in_flight_group = next((c.group_name for c in progress.comms
                                    if c.comm_id == op.comm_id and c.group_name),
                                   "default" if op.comm_id == 0 else "")
