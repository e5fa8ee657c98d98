"""Test helpers: protobuf builders and a fake agent that is a real gRPC client."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import threading
import time

import grpc

from diag.common import handshake
from diag.pb import collector_pb2 as pb
from diag.pb import collector_pb2_grpc as pb_grpc

ALL_REDUCE = dict(name="all_reduce", kind=pb.OP_KIND_COLLECTIVE)


def rank_progress(rank, world, *, pid=None, op=None, age_s=0.0, comm_id=0, seq=0, started=None, completed=None,
                  idle_s=0.0, last_op="all_reduce", local_world=None, lane=pb.OP_KIND_COLLECTIVE, group_name=""):
    """A RankProgress; ``op`` is a dict(name=, kind=) in flight for ``age_s``
    on (comm_id, seq); ``started``/``completed`` fill CommProgress for comm_id."""
    p = pb.RankProgress(rank=rank, local_rank=rank % (local_world or world), world_size=world,
                        pid=pid if pid is not None else 1000 + rank, alive=True, idle_ns=int(idle_s * 1e9),
                        last_op=last_op)
    if op is not None:
        p.oldest_in_flight.CopyFrom(pb.InFlightOp(comm_id=comm_id, seq=seq, age_ns=int(age_s * 1e9), **op))
    if started is not None:
        p.comms.append(pb.CommProgress(comm_id=comm_id, last_started_seq=started,
                                       last_completed_seq=completed if completed is not None else started,
                                       comm_size=world, lane=lane, group_name=group_name))
    return p


def node_report(node_rank, ranks, *, job_id="job1", hostname=None, seq=1, agent_pid=None):
    return pb.NodeReport(job_id=job_id, node_rank=node_rank, hostname=hostname or f"n{node_rank}",
                         agent_pid=agent_pid or 9000 + node_rank, report_seq=seq, ranks=ranks,
                         local_world_size=len(ranks))


def session(address: str, token: str | None) -> tuple:
    """The metadata a caller holding ``token`` sends (None: none at all): the
    real handshake. A wrong token fails the collector's proof; then this is
    what a caller that skipped the check would send (its credential made with
    the wrong token), for the collector to refuse."""
    if token is None:
        return ()
    with grpc.insecure_channel(address) as channel:
        try:
            return handshake.session_metadata(channel, token, address)
        except handshake.ImpostorError:
            nonce_a = os.urandom(handshake.NONCE_BYTES)
            reply = handshake._hello_call(channel)(iter(()), metadata=((handshake.HELLO_METADATA, nonce_a.hex()),),
                                                   timeout=10)
            mac = handshake._mac(token, b"xpu-diag agent", reply.nonce, nonce_a)
            return ((handshake.SESSION_METADATA, (reply.nonce + nonce_a + mac).hex()),)


def answer_hello(token: str, context) -> pb.HelloReply:
    """A fake collector's Hello (a servicer's ``Hello`` returns this): the
    real collector's answer, so that agents take it for the job's."""
    given = dict(context.invocation_metadata()).get(handshake.HELLO_METADATA, "")
    nonce, proof = handshake.answer(token, bytes.fromhex(given))
    return pb.HelloReply(nonce=nonce, proof=proof)


def minted_session(token: str) -> tuple:
    """A valid session's metadata made without a server: whoever holds the
    token can (the credential is stateless, good for any server of the job
    for handshake.SESSION_S)."""
    nonce_a = os.urandom(handshake.NONCE_BYTES)
    nonce_c, proof = handshake.answer(token, nonce_a)
    return ((handshake.SESSION_METADATA, handshake.credential(token, nonce_a, nonce_c, proof, "-")),)


class FakeAgent:
    """Holds a real Connect stream open; ``send`` queues a report, commands
    arrive in ``commands`` (a queue.Queue) from a reader thread."""

    def __init__(self, address: str, token: str | None, metadata: tuple | None = None):
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.CollectorStub(self.channel)
        self.metadata = session(address, token) if metadata is None else metadata
        self._outbox: queue.Queue = queue.Queue()
        self.commands: queue.Queue = queue.Queue()
        self.error: grpc.RpcError | None = None
        self._call = self.stub.Connect(iter(self._outbox.get, None), metadata=self.metadata)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        try:
            for command in self._call:
                self.commands.put(command)
        except grpc.RpcError as exc:
            self.error = exc
        self.commands.put(None)

    def send(self, report: pb.NodeReport) -> None:
        self._outbox.put(report)

    def report_every(self, interval: float, make_report) -> threading.Event:
        """Send ``make_report()`` every ``interval`` s until the returned event is set."""
        stop = threading.Event()

        def loop():
            while not stop.is_set():
                self.send(make_report())
                stop.wait(interval)

        threading.Thread(target=loop, daemon=True).start()
        return stop

    def next_command(self, kind: str, timeout: float = 30.0) -> pb.Command:
        """The next command of ``kind`` ("dump_stacks" / "kill_workers"), skipping others."""
        while True:
            command = self.commands.get(timeout=timeout)
            assert command is not None, f"stream ended before a {kind} command: {self.error}"
            if command.WhichOneof("command") == kind:
                return command

    def upload(self, dump: pb.StackDump, timeout: float = 10.0) -> pb.Ack:
        return self.stub.UploadStacks(dump, metadata=self.metadata, timeout=timeout)

    def close(self, clean: bool = True) -> None:
        if clean:
            self._outbox.put(None)
        else:
            self._call.cancel()
        self._reader.join(timeout=10)
        self.channel.close()


def stamped(report: pb.NodeReport) -> bytes:
    """The report serialised with sent_mono_ns set now (as an agent of this release sends it)."""
    report.sent_mono_ns = time.monotonic_ns()
    return report.SerializeToString()


def perf_window() -> pb.PerfRank:
    """A rank's performance window with five ops, as a GPT-2 job's agent sends it (~4.7 KB a node)."""
    perf = pb.PerfRank(window_s=60.0, launches=1_200_000, steps=600, step_ns=60_000_000_000,
                       last_step_ns=100_000_000, step_name="optimizer.step")
    for name in ("cublasGemmEx", "cublasLtMatmul", "ncclAllReduce", "ncclAllGather", "optimizer.step"):
        perf.ops.add(name=name, kind=pb.OP_KIND_COLLECTIVE, comm_id=0x1234567890abcdef, comm_size=16,
                     count=150_000, timed_count=18_750, timed_ns=9_000_000_000, p50_ns=450_000, p99_ns=2_100_000)
    return perf


class SimulatedAgents:
    """``n`` agents of 8 healthy ranks each (ranks from ``first_rank``), each on
    its own Connect stream over real gRPC, reporting every ``interval`` s from
    one asyncio loop on a thread of its own. They obey ReportPace as
    diag/agent/connection.py does (interval, perf window in one report of N)."""

    def __init__(self, address: str, token: str, n: int, interval: float, world: int, first_node: int = 1,
                 job_id: str = "job1"):
        self.address, self.metadata, self.n, self.interval = address, session(address, token), n, interval
        self.world, self.first_node, self.job_id = world, first_node, job_id
        self.sent = 0
        self.paces: list[pb.ReportPace] = []
        self.errors: list[str] = []
        self._stop = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)

    def start(self) -> "SimulatedAgents":
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _report(self, node: int, perf: bool) -> pb.NodeReport:
        ranks = []
        for local in range(8):
            r = rank_progress(node * 8 + local, self.world, started=100, completed=100)
            r.local_rank = local
            if perf:
                r.perf.CopyFrom(PERF)
            ranks.append(r)
        return node_report(node, ranks, job_id=self.job_id)

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        channel = grpc.aio.insecure_channel(self.address)
        agents = [asyncio.ensure_future(self._agent(channel, self.first_node + i, i * self.interval / self.n))
                  for i in range(self.n)]
        await self._stop.wait()
        for a in agents:
            a.cancel()
        await asyncio.gather(*agents, return_exceptions=True)
        await channel.close()

    async def _agent(self, channel, node: int, phase: float) -> None:
        call = channel.stream_stream("/diag.pb.Collector/Connect", request_serializer=None,
                                     response_deserializer=pb.Command.FromString)(metadata=self.metadata)
        pace = {"interval": self.interval, "every": 1}

        async def read():
            async for command in call:
                if command.WhichOneof("command") == "report_pace":
                    self.paces.append(command.report_pace)
                    pace["interval"] = max(self.interval, command.report_pace.interval_ms / 1000)
                    pace["every"] = max(1, command.report_pace.perf_every)

        reader = asyncio.ensure_future(read())
        full, bare = self._report(node, True), self._report(node, False)
        try:
            await asyncio.sleep(phase)
            n = 0
            while True:
                await call.write(stamped(full if n % pace["every"] == 0 else bare))
                self.sent += 1
                n += 1
                await asyncio.sleep(pace["interval"])
        except grpc.RpcError as exc:
            self.errors.append(f"node {node}: {exc.code().name}")
        finally:
            call.cancel()
            reader.cancel()


PERF = perf_window()


class Throttle:
    """Gives process ``pid`` ``share`` of the wall clock (SIGSTOP / SIGCONT
    every ``period`` s), as a CPU quota would: a real collector short of CPU."""

    def __init__(self, pid: int, share: float, period: float = 0.1):
        self.pid, self.share, self.period = pid, share, period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Throttle":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                time.sleep(self.period * self.share)
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(self.period * (1 - self.share))
                os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        finally:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def wait_ticks(watchdog, n: int = 2, *, full: bool = False, timeout: float = 30.0) -> None:
    """Return once the watchdog's own loop has run ``n`` ticks that began after
    this call (``full``: ticks that take a snapshot and judge the rules, made
    due at once rather than FULL_EVERY_S apart), so whatever was ingested
    before the call has been judged. A check that something does NOT happen
    waits on this, not on a fixed sleep: under load a sleep may end before a
    single tick ran. The loop calls ``self.tick``, so an instance attribute
    wraps it for the wait."""
    done = threading.Semaphore(0)
    real = watchdog.tick

    def tick(*args, **kwargs):
        before = watchdog.full_ticks
        if full:
            watchdog._full_at = 0.0   # the next full pass is due now (monotonic time is past 0)
        try:
            real(*args, **kwargs)
        finally:
            if not full or watchdog.full_ticks > before:
                done.release()

    watchdog.tick = tick
    try:
        for _ in range(n):
            assert done.acquire(timeout=timeout), f"the watchdog ran no {'full ' if full else ''}tick in {timeout} s"
    finally:
        del watchdog.tick   # the class's own again
