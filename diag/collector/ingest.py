"""An ingest process of the collector (--ingest-procs N; docs/collector.md
"Ingest processes"). ``python -m diag.collector.ingest`` is started by the
collector, never by hand.

It serves the Collector service on the collector's own address beside it
(SO_REUSEPORT: the kernel spreads the agents' connections over the ingest
processes), with the same token check. A Connect stream's reports are not
parsed here: they go up the link to the judge as the bytes the agent sent,
many to a message (ingest_link.py), and the judge's commands come down and are
written to their streams as it serialized them. Every other call (uploads,
timelines, the perf view, last words) is forwarded to the judge as is. What
this process saves the judge is gRPC's own work per message, more than half
of a report's CPU on one process (bench/collector_ingest.py --transport-floor).
It exits when its link to the judge ends. The judge holds no agent's stream:
the first ingest process binds the collector's address and tells it the port.

The same process is a report relay (--nodes-per-relay, docs/collector.md
"Report relays") when an agent starts it on its own node with ``--group``:
it binds there, links to the collector's public address with the job token,
tells it ``GROUP@HOST:PORT`` in the link's metadata, and gathers its group's
reports for ``--batch-s`` (a report a second from each of a few dozen nodes:
a longer window than an ingest process's 5 ms, or no two would share a
message).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from diag.collector.auth import TokenInterceptor
from diag.collector.digest import digest
from diag.collector.relay_board import RELAY_METADATA
from diag.collector.server import SERVICE_NAME, SPARE_CALLS, raise_file_limit, server_options
from diag.common import envnames, handshake
from diag.common.children import die_with_parent
from diag.common.atomic import write_atomic
from diag.pb import collector_pb2 as pb
from diag.pb import ingest_pb2 as ipb
from diag.pb import ingest_pb2_grpc as ipb_grpc

log = logging.getLogger("diag.collector")
# Forwarded as they are: (method, kind). Connect is this process's own.
UNARY = ("UploadStacks", "UploadTimeline", "GetTimeline", "GetPerfView", "ReportLastWords")
# How long reports gather before going up: one message per this at most, so
# the judge pays its per-message cost once for many reports. Far below a
# report interval, and the HANG path does not notice it.
BATCH_S = 0.005
# Reports waiting for the link at most: past this the streams stop reading
# (their agents' writes wait, and the agents build their next report when
# gRPC takes it), so a judge that falls behind never makes this process
# buffer without bound; the judge sees the wait as report lag (pace.py).
MAX_PENDING = 2048
# SIGTERM (an agent stopping its relay, the collector its ingest processes):
# what waits goes up and the link ends cleanly within this, else it is cut.
DRAIN_S = 2.0


class _Stream:
    def __init__(self, task: asyncio.Task) -> None:
        self.task = task
        self.down: asyncio.Queue = asyncio.Queue()
        self.abort: tuple[grpc.StatusCode, str] | None = None

    def end(self, code: grpc.StatusCode, message: str) -> None:
        """Cut the stream's read loop; connect() then aborts it with this status."""
        self.abort = (code, message)
        self.task.cancel()


class Ingest:
    def __init__(self, token: str, max_dump_bytes: int, batch_s: float = BATCH_S, urgent_s: float = 0.0) -> None:
        self._token = token
        self._batch_s = batch_s
        self._urgent_ns = int(urgent_s * 1e9)   # a relay: a report with an op this old in flight goes up at once
        self._urgent = asyncio.Event()
        self._max_message = max_dump_bytes + (1 << 20)
        self._streams: dict[int, _Stream] = {}
        self._next = 0
        self._up: list = []
        self._sending = 0   # reports in the link write under way (not taken while it waits)
        self._closed: list[int] = []
        self._kick = asyncio.Event()
        self._room = asyncio.Event()   # clear: MAX_PENDING reports wait for the link, streams stop reading
        self._room.set()
        self._link: grpc.aio.Channel | None = None
        self._link_address = ""
        self._session: tuple[tuple[str, str], float] | None = None   # (metadata pair, made at) on the link
        self._codes = {code.value[0]: code for code in grpc.StatusCode}
        self._draining = False

    # -- the agents' side -----------------------------------------------------
    async def connect(self, request_iterator, context):
        self._next += 1
        sid = self._next
        stream = _Stream(asyncio.current_task())
        self._streams[sid] = stream
        await context.send_initial_metadata(())
        writer = asyncio.ensure_future(self._write(stream, context))
        try:
            while True:
                data = await context.read()
                if data is grpc.aio.EOF:
                    break
                read = _read(data, self._urgent_ns) if self._urgent_ns else None
                self._up.append((sid, data, time.monotonic(), read[1] if read else None))
                self._kick.set()
                if read and read[0]:
                    self._urgent.set()
                if len(self._up) >= MAX_PENDING:   # the judge is behind: stop reading, let gRPC push back
                    self._room.clear()
                    await self._room.wait()
        except asyncio.CancelledError:
            if stream.abort is None:
                raise
        finally:
            writer.cancel()
            del self._streams[sid]
            self._closed.append(sid)
            self._kick.set()
        if stream.abort is not None:
            await context.abort(*stream.abort)

    async def _write(self, stream: _Stream, context) -> None:
        while True:
            command = await stream.down.get()
            if command.abort_code:
                stream.end(self._codes.get(command.abort_code, grpc.StatusCode.UNKNOWN), command.abort_message)
                return
            await context.write(command.command)

    def forward(self, method: str):
        path = f"/{SERVICE_NAME}/{method}"

        async def call(request: bytes, context):
            try:
                return await self._link.unary_unary(path)(request, metadata=(await self._session_pair(),),
                                                          timeout=context.time_remaining())
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")
            except handshake.ImpostorError as exc:
                await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return grpc.unary_unary_rpc_method_handler(call)

    async def _session_pair(self, wait_for_ready: bool = False) -> tuple[str, str]:
        """The link's session credential (the handshake: the token never goes
        on the wire, not even to the judge), made again after RENEW_S."""
        held = self._session
        if held is None or time.monotonic() - held[1] > handshake.RENEW_S:
            credential = await handshake.hello_async(self._link, self._token, self._link_address,
                                                     timeout=None if wait_for_ready else handshake.HELLO_TIMEOUT_S,
                                                     wait_for_ready=wait_for_ready)
            held = self._session = ((handshake.SESSION_METADATA, credential), time.monotonic())
        return held[0]

    def drain(self) -> None:
        """Send what waits up now, end the link and return: a relay stopped
        with its agent would otherwise lose up to a batch window of its
        group's reports (the last ones, which a job's end is judged on)."""
        self._draining = True
        self._urgent.set()
        self._kick.set()

    def unsent(self) -> int:
        """Reports read from the agents' streams that the link has not taken:
        once the link is over, they are lost (their agents do not send them
        again; their next reports supersede them)."""
        return len(self._up) + self._sending

    def end_streams(self, message: str) -> None:
        """End every agent stream still open with UNAVAILABLE and ``message``,
        as an abort does: its agent reports elsewhere, and no stream is left
        for the server's stop to cancel (gRPC logs each of those with a
        CancelledError traceback, at the end of every multi-node job whose
        collector stops before a relay's last agent)."""
        for stream in self._streams.values():
            if stream.abort is None:
                stream.end(grpc.StatusCode.UNAVAILABLE, message)

    # -- the judge's side ---------------------------------------------------
    async def relay(self, link_address: str, relay_of: str | None = None) -> None:
        """Until the link ends: reports up, commands down. ``relay_of``:
        GROUP@HOST:PORT when this is a report relay."""
        options = [("grpc.max_receive_message_length", self._max_message),
                   ("grpc.max_send_message_length", self._max_message)]
        self._link = grpc.aio.insecure_channel(link_address, options=options)
        self._link_address = link_address
        try:   # wait_for_ready: the first of us binds before the judge serves its link
            session = await self._session_pair(wait_for_ready=True)
        except (handshake.ImpostorError, grpc.aio.AioRpcError) as exc:
            why = str(exc) if isinstance(exc, handshake.ImpostorError) else f"{exc.code().name} {exc.details()}"
            log.warning("ingest process %d: no link to the collector: %s", os.getpid(), why[:300])
            return
        metadata = (session,) + (((RELAY_METADATA, relay_of),) if relay_of else ())
        call = ipb_grpc.IngestLinkStub(self._link).Relay(metadata=metadata, wait_for_ready=True)
        down = asyncio.ensure_future(self._down(call))
        down.add_done_callback(lambda _: self._kick.set())   # a refused or lost link ends the loop at once
        ended = None
        try:
            while True:
                await self._kick.wait()
                self._kick.clear()
                if down.done():
                    break
                if not self._urgent.is_set() and not self._draining:
                    try:   # the batch window, cut short by a report that may be a hang's
                        await asyncio.wait_for(self._urgent.wait(), self._batch_s)
                    except asyncio.TimeoutError:
                        pass
                self._urgent.clear()
                up, closed, self._up, self._closed = self._up, self._closed, [], []
                now, window = time.monotonic(), self._batch_s
                reports = [ipb.RelayedReport(stream=sid, report=data, held_us=int(1e6 * min(now - at, window)),
                                             digest=read) for sid, data, at, read in coalesced(up)]
                self._sending = len(up)
                await call.write(ipb.RelayUp(reports=reports, closed=closed))
                self._sending = 0
                self._room.set()
                if self._draining and not self._up:   # what came in during this write goes up first
                    await call.done_writing()
                    break
        except grpc.aio.AioRpcError as exc:
            ended = exc
        finally:
            down.cancel()
        if ended is None and down.done() and not down.cancelled():
            ended = down.exception()   # e.g. refused: the collector had no call slot left
        if isinstance(ended, grpc.aio.AioRpcError):   # one line, whichever side saw it first
            log.warning("ingest process %d: link to the collector ended: %s %s", os.getpid(), ended.code().name,
                        (ended.details() or "")[:200])

    async def _down(self, call) -> None:
        async for message in call:
            for command in message.commands:
                stream = self._streams.get(command.stream)
                if stream is not None:
                    stream.down.put_nowait(command)


async def serve(args) -> int:
    token = os.environ.get(envnames.JOB_TOKEN, "")
    raise_file_limit(args.max_agents)
    ingest = Ingest(token, args.max_dump_bytes, args.batch_s, args.urgent_s)
    handlers = {"Connect": grpc.stream_stream_rpc_method_handler(ingest.connect)}
    handlers.update({method: ingest.forward(method) for method in UNARY})
    calls = args.max_agents + SPARE_CALLS
    server = grpc.aio.server(interceptors=[TokenInterceptor(token)], maximum_concurrent_rpcs=calls,
                             options=server_options(args.max_dump_bytes, calls, reuse_port=True))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        port = server.add_insecure_port(args.listen)
    except RuntimeError:
        port = 0
    if not port:   # the judge says the one line (--listen: cannot bind ...)
        return 2
    await server.start()
    if args.port_file:
        write_atomic(args.port_file, str(port).encode())
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    loop = asyncio.get_running_loop()
    relay_of = None
    if args.group is not None:   # a report relay: the collector sends its group here
        relay_of = f"{args.group}@{_host(args.listen)}:{port}"
    relay = asyncio.ensure_future(ingest.relay(args.link, relay_of))

    def stop() -> None:
        ingest.drain()
        loop.call_later(DRAIN_S, relay.cancel)   # a link that takes nothing more is cut

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    try:
        await relay
    except asyncio.CancelledError:
        pass
    unsent = ingest.unsent()
    if unsent:   # one line: a count of reports missing at the collector is explained here
        why = (f"stopped, and the collector did not take what it held within {DRAIN_S:g} s (it is behind)" if relay.cancelled()
               else "its link to the collector ended")
        log.warning("ingest process %d: %s: %d report(s) read from the agents never reached it", os.getpid(),
                    why, unsent)
    ingest.end_streams(f"the {'relay' if relay_of else 'ingest process'} stopped: its link to the collector ended")
    await server.stop(1.0)
    return 0


def coalesced(up: list) -> list:
    """A batch's reports, (stream, bytes, when read, digest or None), as
    they go up: of a stream's plain reports (with a digest) only the newest,
    which says all the older ones said, newer; its digest counts them
    (``superseded``), for the judge counts every report. One that carried
    the performance window goes up unless the newest carries it too: the
    judge keeps a rank's newest window apart from its newest report. At a
    report a second and a 2 s batch the judge read 74 % of the reports at
    25,000 agents (docs/gpu-runs/h200x1/s25/)."""
    newest: dict[int, int] = {}
    for i, (sid, _, _, read) in enumerate(up):
        if read is not None:
            newest[sid] = i
    if len(newest) == sum(read is not None for _, _, _, read in up):
        return up   # no stream twice: nothing to leave out
    out, left = [], {}
    for i, item in enumerate(up):
        sid, read = item[0], item[3]
        if read is not None and newest[sid] != i and (not read.perf or up[newest[sid]][3].perf):
            left[sid] = left.get(sid, 0) + 1 + read.superseded
            continue
        out.append(item)
    for sid, n in left.items():
        up[newest[sid]][3].superseded += n
    return out


def _read(data: bytes, age_ns: int) -> tuple[bool, ipb.ReportDigest | None]:
    """A relay's reading of a report: (whether it shows an op in flight for
    ``age_ns`` or more, its digest for the judge or None). A stalling report
    goes up at once rather than at the end of the batch window, so the HANG
    path does not wait for the batching; a plain one with its digest, so the
    judge parses it only when it next judges (digest.py). Parsing here costs
    the relay's node ~20 us a report."""
    try:
        report = pb.NodeReport.FromString(data)
    except DecodeError:
        return False, None   # the collector refuses it, with the reason
    stalling = any(r.oldest_in_flight.age_ns >= age_ns for r in report.ranks if r.HasField("oldest_in_flight"))
    return stalling, digest(report)


def _host(listen: str) -> str:
    return listen.rsplit(":", 1)[0]   # an IPv6 host keeps its brackets: HOST:PORT for gRPC


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.parent_pid is not None:   # a report relay: it dies with the agent that started it
        die_with_parent()
        if os.getppid() != args.parent_pid:
            return 0
    who = "relay" if args.group is not None else "collector"
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"xpu_diag {who}: %(message)s")
    return asyncio.run(serve(args))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m diag.collector.ingest", description=__doc__.splitlines()[0])
    p.add_argument("--listen", required=True, help="the collector's bound HOST:PORT")
    p.add_argument("--link", required=True, help="unix:PATH of the judge's link socket, or the collector's "
                   "HOST:PORT for a report relay")
    p.add_argument("--max-agents", type=int, required=True)
    p.add_argument("--max-dump-bytes", type=int, required=True)
    p.add_argument("--port-file", default=None, help="write the bound port here (the first one, on port 0)")
    p.add_argument("--group", type=int, default=None, help="a report relay for this group of nodes")
    p.add_argument("--batch-s", type=float, default=BATCH_S, help="how long reports gather before going up")
    p.add_argument("--urgent-s", type=float, default=0.0,
                   help="send a report with an op in flight this long at once (0: never; a relay's is 1)")
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this process (the agent) does")
    return p


if __name__ == "__main__":
    sys.exit(main())
