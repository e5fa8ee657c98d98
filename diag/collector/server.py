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
import logging
import os
import resource
import signal
import sys
import threading
from typing import Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from diag.common.atomic import write_atomic
from diag.collector import access
from diag.collector.auth import TokenInterceptor
from diag.collector.config import Config, ConfigError, check_timeline_writable, parse_args, parse_listen
from diag.collector.events import EventStore
from diag.collector.servicer import CollectorServicer, SessionRegistry
from diag.collector.state import JobState
from diag.collector.watchdog import Watchdog
from diag.pb import collector_pb2_grpc as pb_grpc
from diag.timeline.gather import TimelineGatherer

log = logging.getLogger("diag.collector")
SERVICE_NAME = "diag.pb.Collector"
# Calls beyond one per agent stream, for uploads and health checks, so a full
# house of agents can never starve the dump path.
SPARE_CALLS = 64
# Threads for the work that must not run on the loop (dump files, timelines, the perf view).
BLOCKING_THREADS = 8
FDS_SPARE = 256   # file descriptors beyond one per agent: event files, pipes, gRPC's own


def _server_options(config: Config, calls: int) -> list[tuple[str, int]]:
    return [("grpc.max_receive_message_length", config.max_dump_bytes + (1 << 20)),
            ("grpc.so_reuseport", 0),
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

    def _call(self, coro, timeout: float | None = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _build(self):
        self.registry.gate = asyncio.Event()
        self.registry.gate.set()
        calls = self.config.max_agents + SPARE_CALLS
        inner = grpc.aio.server(migration_thread_pool=self._pool, interceptors=[TokenInterceptor(self.config.token)],
                                maximum_concurrent_rpcs=calls, options=_server_options(self.config, calls))
        self.servicer = CollectorServicer(self.config, self.state, self.registry, self.events, self.timelines,
                                          self._pool)
        pb_grpc.add_CollectorServicer_to_server(self.servicer, inner)
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

    def stop(self, grace: float | None) -> threading.Event:
        """Stop serving (in-flight calls get ``grace`` seconds), then the
        watchdog (pending hang.json rewrites flushed) and the loop."""
        if self._stopping:
            return self._stopped
        self._stopping = True
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
    try:
        port = server.add_insecure_port(listen_addr)
    except RuntimeError:
        port = 0
    if not port:
        server.stop(0)
        raise ConfigError(f"--listen: cannot bind {listen_addr!r} (address in use or not local); pick another HOST:PORT")
    return server, port


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


def serve(config: Config, stop: threading.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT (or ``stop`` is set); returns the exit code."""
    raise_file_limit(config.max_agents)
    server, port = create_server(config.listen, config)
    server.start()
    address = bound_address(config.listen, port)
    if config.address_file:
        try:
            write_atomic(config.address_file, f"{address}\n".encode())
        except OSError as exc:  # checked in main(); this is the race (or a caller of serve)
            server.stop(grace=0).wait(5)
            raise ConfigError(f"--address-file: cannot write {config.address_file!r} "
                              f"({exc.strerror or exc}); give a file path in a writable directory") from None
    access_file = _leave_access_file(config, address)
    log.info("serving job %s on %s (hang timeout %gs, idle timeout %gs, action %s, timeline %s)", config.job_id,
             address, config.hang_timeout_s, config.idle_timeout_s, config.hang_action, config.timeline_path)
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=2).wait(5)
    if access_file:
        try:
            os.unlink(access_file)
        except OSError:
            pass
    log.info("stopped (%d node reports ingested; streams: %s)", server.state.reports,
             ", ".join(f"{n} {how}" for how, n in sorted(server.servicer.streams.items())) or "none")
    return 0


def _leave_access_file(config: Config, address: str) -> str | None:
    """Write collector.json for ``xpu-diag top|timeline`` (diag/collector/access.py);
    a failure is one warning: the job's own agents do not need the file."""
    host, port = parse_listen(address)
    if host in ("0.0.0.0", "[::]", "::"):
        host = "127.0.0.1" if host == "0.0.0.0" else "[::1]"
    try:
        return access.write(config.timeline_path, config.job_id, f"{host}:{port}", config.token)
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
        if config.address_file:
            parent = os.path.dirname(os.path.abspath(config.address_file))
            if os.path.isdir(config.address_file):
                raise ConfigError(f"--address-file: {config.address_file!r} is a directory; "
                                  f"give a file path such as {os.path.join(config.address_file, 'collector.addr')!r}")
            if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
                raise ConfigError(f"--address-file: directory {parent!r} does not exist or is not writable")
        return serve(config)
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
