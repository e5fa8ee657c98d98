"""The judge's end of the ingest processes' links (--ingest-procs; the other
end is diag/collector/ingest.py, docs/collector.md "Ingest processes").

One Relay stream per ingest process. Its reports arrive many to a message, as
the bytes their agents sent: each is parsed and ingested here exactly as a
Connect stream's would be (a report relay's plain reports come with a
digest, and are parsed only at the next snapshot: digest.py), so the state,
the rules and the tick never know which process an agent's stream lives in. Each relayed agent stream gets an
AgentSession whose ``wake`` is the link's: a broadcast wakes the link's
writer, which sends every queued command down in one message. Refusals (a
report for another job, --max-agents, a bad report) go down as an abort for
that stream only.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

import grpc
from google.protobuf.message import DecodeError

from diag.collector.auth import metadata_value
from diag.collector.relay_board import RELAY_METADATA
from diag.collector.servicer import AgentSession, CollectorServicer, SessionRegistry
from diag.collector.state import JobState, ReportError
from diag.pb import collector_pb2 as pb
from diag.pb import ingest_pb2 as ipb
from diag.pb import ingest_pb2_grpc as ipb_grpc

log = logging.getLogger("diag.collector")


class _Link:
    """One ingest process's streams, on the judge's loop."""

    def __init__(self) -> None:
        self.sessions: dict[int, AgentSession] = {}
        self.refused: set[int] = set()            # aborted: their later reports are dropped
        self.aborts: collections.deque = collections.deque()
        self.wake = asyncio.Event()

    def abort(self, stream: int, code: grpc.StatusCode, message: str) -> None:
        self.refused.add(stream)
        self.aborts.append(ipb.RelayedCommand(stream=stream, abort_code=code.value[0], abort_message=message))
        self.wake.set()


class IngestLinkServicer(ipb_grpc.IngestLinkServicer):
    def __init__(self, servicer: CollectorServicer, state: JobState, registry: SessionRegistry) -> None:
        self._servicer = servicer
        self._state = state
        self._registry = registry
        self.links = 0   # open now (tests, logs)

    async def Relay(self, request_iterator, context):
        relay_of = metadata_value(context.invocation_metadata(), RELAY_METADATA)
        board = self._servicer.relays
        group = None
        if relay_of is not None:   # a report relay on an agent's node (--nodes-per-relay)
            serving = board.serving(relay_of) if board is not None else None
            if serving is not None:
                await context.abort(grpc.StatusCode.ALREADY_EXISTS,
                                    f"the relay at {serving} serves this group already")
            linked = board.link(relay_of) if board is not None else None
            if linked is None:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"relay {relay_of[:80]!r}: this collector runs no --nodes-per-relay, "
                                    f"or that is not GROUP@HOST:PORT")
            group, address = linked
        link = _Link()
        self.links += 1
        writer = asyncio.ensure_future(self._push(link, context))
        gate = self._registry.gate
        try:
            while True:
                if gate is not None and not gate.is_set():
                    await gate.wait()   # the declaring tick holds ingest: these reports wait too
                up = await context.read()
                if up is grpc.aio.EOF:
                    break
                # When the judge ingests: time spent in the relay counts as
                # behind (pace.py), but for its batch window, which is by design.
                now = time.monotonic()
                if gate is not None and not gate.is_set():
                    # Read as the hold began: wait too. Every link had a read
                    # pending, so one message each (16 reports of a 32-node
                    # group, 6,000 at 12,500 nodes) was ingested against the
                    # declaring tick for the GIL.
                    try:
                        await gate.wait()
                    except asyncio.CancelledError:   # cut meanwhile (a relay stopping): read is taken
                        self._take(link, up, now)
                        raise
                self._take(link, up, now)
        finally:
            writer.cancel()
            self.links -= 1
            if group is not None:
                board.lost(group, address)
            for session in link.sessions.values():   # the ingest process is gone, and its agents' streams with it
                self._end(session, "link lost")

    def _take(self, link: _Link, up: ipb.RelayUp, now: float) -> None:
        for relayed in up.reports:
            self._ingest(link, relayed, now - relayed.held_us * 1e-6)
        for stream in up.closed:
            link.refused.discard(stream)
            session = link.sessions.pop(stream, None)
            if session is not None:
                self._end(session, "ended")

    def _ingest(self, link: _Link, relayed: ipb.RelayedReport, now: float) -> None:
        stream = relayed.stream
        if stream in link.refused:
            return
        session = link.sessions.get(stream)
        if session is not None and relayed.HasField("digest"):   # a relay's plain report: parsed at the next snapshot
            if self._state.ingest_digest(relayed.report, relayed.digest, now, session.clock):
                return
        try:
            report = pb.NodeReport.FromString(relayed.report)
        except DecodeError as exc:
            link.abort(stream, grpc.StatusCode.INTERNAL, f"failed to parse the NodeReport: {exc}")
            return
        if session is None:
            session, refused = self._servicer.open_session(report, link.wake)
            if refused is not None:
                link.abort(stream, *refused)
                return
            link.sessions[stream] = session
            if session.commands:
                link.wake.set()
        try:
            self._state.ingest(report, now, session.clock, relayed.digest.superseded)
        except ReportError as exc:
            link.abort(stream, grpc.StatusCode.INVALID_ARGUMENT, f"bad NodeReport: {exc}")
            del link.sessions[stream]
            self._end(session, "ReportError")

    def _end(self, session: AgentSession, how: str) -> None:
        self._servicer.streams[how] += 1
        self._servicer.close_session(session)

    async def _push(self, link: _Link, context) -> None:
        """The link's writer: every stream's queued commands in one message,
        in each stream's order (a KillWorkers never overtakes its DumpStacks)."""
        try:
            while True:
                await link.wake.wait()
                link.wake.clear()
                down = ipb.RelayDown()
                while link.aborts:
                    down.commands.append(link.aborts.popleft())
                for stream, session in list(link.sessions.items()):
                    while session.commands:
                        down.commands.add(stream=stream, command=session.commands.popleft().SerializeToString())
                if down.commands:
                    await context.write(down)
        except asyncio.CancelledError:
            raise
        except Exception:   # the link ended under the write: Relay cleans up
            return
