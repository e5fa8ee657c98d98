"""``create_server`` / ``serve`` / ``main`` of the collector.

``create_server`` builds everything (state, rules, event store, a ``grpc.aio``
server with the token interceptor and the grpc.health.v1 service) and binds;
the caller starts it. The aio server runs on an event loop in a thread of its
own, so the API stays synchronous (``start``, ``stop(grace).wait()``) for the
launcher and the tests. Tests bind 127.0.0.1:0 and read the port back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from diag.common.atomic import output_file_problem, write_atomic
from diag.common import collector_access as access
from diag.collector.auth import TokenInterceptor
from diag.collector.config import Config, ConfigError, check_timeline_writable, parse_args, parse_listen
from diag.collector.events import EventStore
from diag.collector.ingest_link import IngestLinkServicer
from diag.collector.relay_board import RelayBoard
from diag.collector.servicer import CollectorServicer, SessionRegistry
from diag.collector.state import JobState
from diag.collector.watchdog import Watchdog
from diag.common import envnames, safe_dirs
from diag.pb import collector_pb2_grpc as pb_grpc
from diag.pb import ingest_pb2_grpc as ipb_grpc
from diag.collector.timelines import TimelineGatherer

log = logging.getLogger("diag.collector")
SERVICE_NAME = "diag.pb.Collector"
# Calls beyond one per agent stream, for uploads and health checks, so a full
# house of agents can never starve the dump path.
SPARE_CALLS = 64
# Threads for the work that must not run on the loop (dump files, timelines, the perf view).
BLOCKING_THREADS = 8
FDS_SPARE = 256   # file descriptors beyond one per agent: event files, pipes, gRPC's own


def server_options(max_dump_bytes: int, calls: int, reuse_port: bool = False) -> list[tuple[str, int]]:
    # SO_REUSEPORT only where the ingest processes share the address (ingest.py):
    # anywhere else a second collector on the same port must fail to bind.
    return [("grpc.max_receive_message_length", max_dump_bytes + (1 << 20)),
            ("grpc.so_reuseport", int(reuse_port)),
            # When every agent of a big job connects at once, grpc core's default
            # of 1000 pending calls would cancel the rest. Allow one per agent.
            ("grpc.server.max_pending_requests", calls),
            ("grpc.server.max_pending_requests_hard_limit", 2 * calls),
            # Ping agents so a vanished host frees its stream, and let agents keep
            # their connection alive with pings of their own.
            ("grpc.keepalive_time_ms", 30_000), ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ("grpc.http2.max_ping_strikes", 0),
            # Bandwidth-delay probing pings every stream's peer as data arrives:
            # measured ~70 us of collector CPU per report (docs/collector.md,
            # Scale), for windows that 5 KB reports never fill.
            ("grpc.http2.bdp_probe", 0)]


class CollectorServer:
    """The collector: a ``grpc.aio`` server on its own event loop thread, the
    watchdog thread and the pacer (overload, pace.py) on the loop.

    ``state``, ``events``, ``watchdog``, ``registry`` and ``pacer`` are
    exposed for tests and the launcher's logs. ``start()``, ``stop(grace)``
    (returns a threading.Event set once stopped) and
    ``wait_for_termination()`` are what grpc.Server's are.
    """

    def __init__(self, config: Config, state: JobState, registry: SessionRegistry, events: EventStore,
                 watchdog: Watchdog, pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self.config = config
        self.state = state
        self.registry = registry
        self.events = events
        self.watchdog = watchdog
        self.timelines = watchdog.timelines
        self.pacer = watchdog.pacer
        self._pool = pool
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="collector-loop", daemon=True)
        self._thread.start()
        self._stopped = threading.Event()
        self._stopping = False
        self._inner, self._health = self._call(self._build())
        registry.loop = self._loop
        self.ingest: IngestProcs | None = None   # --ingest-procs, once bound (create_server)

    def _call(self, coro, timeout: float | None = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _build(self):
        self.registry.gate = asyncio.Event()
        self.registry.gate.set()
        calls = self.config.max_agents + SPARE_CALLS
        if self.config.nodes_per_relay:
            # The relays' links, beside every agent's stream before it moves;
            # two per group: a group asked again (relay_board.ASK_AGAIN_S) can have
            # a second relay link before the first is gone. Short of slots, a
            # link is refused and its group reports directly for good (seen at
            # 12,500 agents: 120 of 391 groups).
            calls += 2 * (self.config.max_agents // self.config.nodes_per_relay + 1)
        options = server_options(self.config.max_dump_bytes, calls)
        inner = grpc.aio.server(migration_thread_pool=self._pool, interceptors=[TokenInterceptor(self.config.token)],
                                maximum_concurrent_rpcs=calls, options=options)
        self.servicer = CollectorServicer(self.config, self.state, self.registry, self.events, self.timelines,
                                          self._pool)
        self.servicer.hang_marks = self.watchdog.hang_marks   # top's hung and culprit marks
        pb_grpc.add_CollectorServicer_to_server(self.servicer, inner)
        self.relay = None
        if self.config.nodes_per_relay:   # the servicer asks agents to serve relays and sends the rest to them
            self.servicer.relays = RelayBoard(self.config.nodes_per_relay)
        if self.config.ingest_procs or self.config.nodes_per_relay:
            self.relay = IngestLinkServicer(self.servicer, self.state, self.registry)
            ipb_grpc.add_IngestLinkServicer_to_server(self.relay, inner)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, inner)
        for name in ("", SERVICE_NAME):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        return inner, health_servicer

    def add_insecure_port(self, address: str) -> int:
        async def add():
            return self._inner.add_insecure_port(address)
        return self._call(add())

    def start(self) -> None:
        self._call(self._inner.start())
        self.pacer.start(self._loop)
        self.watchdog.start()
        if self.ingest is not None:
            self.ingest.start(lambda: self.relay.links)

    def stop(self, grace: float | None) -> threading.Event:
        """Stop serving (in-flight calls get ``grace`` seconds), then the
        watchdog (pending hang.json rewrites flushed) and the loop."""
        if self._stopping:
            return self._stopped
        self._stopping = True
        if self.ingest is not None:
            self.ingest.stop()
        try:
            self._call(self._health.enter_graceful_shutdown(), 10)
            self._call(self._inner.stop(grace), (grace or 0) + 30)
        except (concurrent.futures.TimeoutError, RuntimeError) as exc:
            log.warning("stopping the gRPC server: %r", exc)
        self.pacer.stop()
        self.watchdog.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._stopped.set()
        return self._stopped

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        """True once stopped, False at ``timeout``."""
        return self._stopped.wait(timeout)


def create_server(listen_addr: str, config: Config) -> tuple[CollectorServer, int]:
    """Build the collector and bind ``listen_addr`` only; returns (server, port).

    The server is not started. Raises ConfigError (one line) if the address
    is malformed or cannot be bound.
    """
    parse_listen(listen_addr)
    state, registry, events = JobState(), SessionRegistry(config.max_agents), EventStore(config)
    timelines = TimelineGatherer(config.job_id, registry)
    watchdog = Watchdog(config, state, registry, events, timelines=timelines)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=BLOCKING_THREADS, thread_name_prefix="collector-io")
    server = CollectorServer(config, state, registry, events, watchdog, pool)
    if config.ingest_procs:
        return server, _bind_through_ingest(server, listen_addr, config)
    try:
        port = server.add_insecure_port(listen_addr)
    except RuntimeError:
        port = 0
    if not port:
        server.stop(0)
        raise ConfigError(f"--listen: cannot bind {listen_addr!r} (address in use or not local); pick another HOST:PORT")
    return server, port


def _bind_through_ingest(server: CollectorServer, listen_addr: str, config: Config) -> int:
    """--ingest-procs: this process binds only the link socket; the first
    ingest process binds ``listen_addr`` (port 0: any) and says which port,
    the others join it there. No agent's stream lives in the judge."""
    server.ingest = IngestProcs(config)
    try:
        linked = server.add_insecure_port(f"unix:{server.ingest.socket}")
    except RuntimeError:
        linked = 0
    if not linked:
        server.stop(0)
        raise ConfigError(f"--ingest-procs: cannot bind the link socket {server.ingest.socket!r}; "
                          f"run with --ingest-procs 0")
    try:
        return server.ingest.bind(listen_addr)
    except ConfigError:
        server.stop(0)
        raise


class IngestProcs:
    """The ingest processes (ingest.py) and their link socket, in a directory
    only this user can enter: the link carries the agents' reports. One that
    exits is started again (its agents reconnect to the others meanwhile)."""

    RESTARTS_PER_MINUTE = 5

    def __init__(self, config: Config) -> None:
        self._config = config
        self._dir = tempfile.mkdtemp(prefix="xpu_diag-ingest-")   # 0700
        self.socket = os.path.join(self._dir, "link.sock")
        self.address = ""
        self.procs: list[subprocess.Popen] = []
        self._stopping = threading.Event()
        self._restarts: list[float] = []
        self._watch: threading.Thread | None = None

    def _spawn(self, listen: str, port_file: str | None = None) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "diag.collector.ingest", "--listen", listen, "--link", f"unix:{self.socket}",
               "--max-agents", str(self._config.max_agents), "--max-dump-bytes", str(self._config.max_dump_bytes)]
        if port_file:
            cmd += ["--port-file", port_file]
        return subprocess.Popen(cmd, env={**os.environ, envnames.JOB_TOKEN: self._config.token},
                                stdin=subprocess.DEVNULL)

    def bind(self, listen_addr: str, timeout_s: float = 60.0) -> int:
        """Start the first ingest process on ``listen_addr``; returns the port
        it bound, or raises ConfigError with its one line."""
        port_file = os.path.join(self._dir, "port")
        first = self._spawn(listen_addr, port_file)
        self.procs.append(first)
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(port_file):
            code = first.poll()
            if code == 2:   # its bind failed: the same line as without ingest processes
                self.stop()
                raise ConfigError(f"--listen: cannot bind {listen_addr!r} (address in use or not local); "
                                  f"pick another HOST:PORT")
            if code is not None or time.monotonic() > deadline:
                self.stop()
                why = f"exited with status {code}" if code is not None else f"did not bind within {timeout_s:g} s"
                raise ConfigError(f"--ingest-procs: the first ingest process {why} (its lines above); "
                                  f"run with --ingest-procs 0")
            time.sleep(0.02)
        with open(port_file) as f:
            port = int(f.read())
        self.address = bound_address(listen_addr, port)
        return port

    def start(self, links, ready_s: float = 60.0) -> None:
        """The others, then wait until every one has its link up (``links()``:
        how many are), so that the address goes out only once the agents
        connecting to it are spread over all of them."""
        self.procs += [self._spawn(self.address) for _ in range(self._config.ingest_procs - 1)]
        deadline = time.monotonic() + ready_s
        while links() < len(self.procs) and time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.05)
        if links() < len(self.procs):
            log.warning("only %d of %d ingest process(es) came up; the others are started again",
                        links(), len(self.procs))
        log.info("%d ingest process(es) serve the agents on %s (pids %s); this one judges", len(self.procs),
                 self.address, ", ".join(str(p.pid) for p in self.procs))
        self._watch = threading.Thread(target=self._keep, name="collector-ingest-watch", daemon=True)
        self._watch.start()

    def _keep(self) -> None:
        while not self._stopping.wait(1.0):
            for i, proc in enumerate(self.procs):
                if proc.poll() is None or self._stopping.is_set():
                    continue
                now = time.monotonic()
                self._restarts = [t for t in self._restarts if now - t < 60] + [now]
                if len(self._restarts) > self.RESTARTS_PER_MINUTE:
                    if len(self._restarts) == self.RESTARTS_PER_MINUTE + 1:
                        log.error("ingest processes keep exiting (%d in a minute); not starting more: the "
                                  "remaining ones serve the agents", len(self._restarts))
                    continue
                log.warning("ingest process %d exited (%s); its agents reconnect to the others, starting "
                            "another", proc.pid, proc.returncode)
                self.procs[i] = self._spawn(self.address)

    def stop(self) -> None:
        self._stopping.set()
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        shutil.rmtree(self._dir, ignore_errors=True)


def bound_address(listen_addr: str, port: int) -> str:
    host, _ = parse_listen(listen_addr)
    return f"{host}:{port}"


def raise_file_limit(max_agents: int) -> None:
    """One socket per agent: raise the soft file limit toward the hard one so
    that --max-agents fit; say once if they cannot."""
    want = max_agents + FDS_SPARE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < want:
        log.warning("the file limit (%d) holds about %d agents' connections, fewer than --max-agents %d: "
                    "raise the hard limit (ulimit -Hn) to %d or more", soft, max(0, soft - FDS_SPARE),
                    max_agents, want)


# Every report replaces its ranks' entries: at 12,500 nodes 100,000 objects a
# second, each alive about a second. Under the default thresholds (700, 10,
# 10) they were promoted to the old generation and swept by a full
# collection every few seconds: 7.6 s of 40 (0.19 of the collector's 0.92
# cores) at 12,500 agents on the VM. A young generation of 50,000 lets them
# die before promotion (refcounts free them; the collections only walk
# them), and freezing what start-up made keeps it out of every full pass.
# Cycles are still collected; a hang's declaring tick pauses collections
# anyway (watchdog.gc_paused).
GC_THRESHOLDS = (50_000, 20, 10)


def serve(config: Config, stop: threading.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT (or ``stop`` is set); returns the exit code."""
    # The handlers go in before the address goes out: a stop right after it is ours to handle.
    with _stop_signals() as signalled:
        return _serve(config, stop or threading.Event(), signalled)


def _serve(config: Config, stop: threading.Event, signalled: list[int]) -> int:
    raise_file_limit(config.max_agents)
    server, port = create_server(config.listen, config)
    server.start()
    gc.freeze()   # the collector's own process only: serve(), not create_server() (tests run that in-process)
    gc.set_threshold(*GC_THRESHOLDS)
    address = bound_address(config.listen, port)
    if config.address_file:
        try:
            write_atomic(config.address_file, f"{address}\n".encode())
        except OSError as exc:  # checked in main(); this is the race (or a caller of serve)
            server.stop(grace=0).wait(5)
            raise ConfigError(f"--address-file: cannot write {config.address_file!r} "
                              f"({exc.strerror or exc}); give a file path in a writable directory") from None
    access_file = _leave_access_file(config, address)
    verdicts = _start_metrics(config, server)
    log.info("serving job %s on %s (hang timeout %gs, idle timeout %gs, action %s, timeline %s)", config.job_id,
             address, config.hang_timeout_s, config.idle_timeout_s, config.hang_action, config.timeline_path)
    while not signalled and not stop.wait(STOP_POLL_S):
        pass
    server.stop(grace=2).wait(5)
    if verdicts is not None:
        verdicts.stop()
    if access_file:
        try:
            os.unlink(access_file)
        except OSError:
            pass
    log.info("stopped (%d node reports ingested; streams: %s)", server.state.reports,
             ", ".join(f"{n} {how}" for how, n in sorted(server.servicer.streams.items())) or "none")
    return 0


STOP_POLL_S = 0.1   # how soon a stop signal is acted on


@contextlib.contextmanager
def _stop_signals():
    """Inside, SIGTERM and SIGINT append to the list yielded (in the main
    thread only: elsewhere Python cannot take them); the previous handlers
    come back after. The handler takes no lock: one that called Event.set was
    re-entered by a second signal while the first held the Event's lock,
    deadlocked, and the collector then ignored every SIGTERM (an orphan of a
    killed launcher, still running minutes later)."""
    signalled: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda signum, _frame: signalled.append(signum))
    try:
        yield signalled
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_metrics(config: Config, server: CollectorServer):
    """The verdicts' /metrics (diag/collector/metrics.py) if asked; a port that
    cannot be had is one warning, and hang detection goes on."""
    if config.collector_metrics_port is None:
        return None
    from diag.collector.metrics import VerdictExporter
    exporter = VerdictExporter(config.job_id, server.watchdog)
    why = exporter.start(config.metrics_addr, config.collector_metrics_port)
    if why:
        log.warning("%s", why)
        return None
    log.info("verdict metrics on http://%s:%d/metrics", config.metrics_addr, exporter.port)
    return exporter


def _leave_access_file(config: Config, address: str) -> str | None:
    """Write collector.json for ``xpu-diag top|timeline`` (diag/common/collector_access.py);
    a failure is one warning: the job's own agents do not need the file."""
    host, port = parse_listen(address)
    if host in ("0.0.0.0", "[::]", "::"):
        host = "127.0.0.1" if host == "0.0.0.0" else "[::1]"
    try:
        return access.write(config.timeline_path, config.job_id, f"{host}:{port}", config.token)
    except safe_dirs.Unwritable as exc:   # its line names the directory and why
        log.warning("%s; xpu-diag top/timeline then need --collector", exc)
    except OSError as exc:
        log.warning("cannot write %s under %s (%s); xpu-diag top/timeline then need --collector",
                    access.ACCESS_FILE, config.timeline_path, exc.strerror or exc)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m diag.collector``: parse, check, serve. Bad input: one line, exit 2."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="xpu_diag collector: %(message)s")
    prog = "python -m diag.collector"
    try:
        config = parse_args(sys.argv[1:] if argv is None else argv)
        check_timeline_writable(config.timeline_path)
        problem = config.address_file and output_file_problem("--address-file", config.address_file,
                                                              "collector.addr")
        if problem:
            raise ConfigError(problem)
        return serve(config)
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
