"""``create_server`` / ``serve`` / ``main`` of the collector.

``create_server`` builds everything (state, rules, event store, gRPC server
with the token interceptor and the grpc.health.v1 service) and binds; the
caller starts it. Tests bind 127.0.0.1:0 and read the port back.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
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
# Threads beyond one per agent stream, for uploads and health checks, so a
# full house of agents can never starve the dump path.
SPARE_THREADS = 32


class CollectorServer(grpc.Server):
    """A grpc.Server whose start/stop also run the watchdog.

    ``state``, ``events``, ``watchdog`` and ``registry`` are exposed for tests
    and the launcher's logs; everything else is plain grpc.Server.
    """

    def __init__(self, inner: grpc.Server, config: Config, state: JobState, registry: SessionRegistry,
                 events: EventStore, watchdog: Watchdog, health_servicer: health.HealthServicer) -> None:
        self._inner = inner
        self.config = config
        self.state = state
        self.registry = registry
        self.events = events
        self.watchdog = watchdog
        self.timelines = watchdog.timelines
        self._health = health_servicer

    def add_generic_rpc_handlers(self, generic_rpc_handlers):
        return self._inner.add_generic_rpc_handlers(generic_rpc_handlers)

    def add_registered_method_handlers(self, service_name, method_handlers):
        return self._inner.add_registered_method_handlers(service_name, method_handlers)

    def add_insecure_port(self, address):
        return self._inner.add_insecure_port(address)

    def add_secure_port(self, address, server_credentials):
        return self._inner.add_secure_port(address, server_credentials)

    def start(self):
        self._inner.start()
        self.watchdog.start()

    def stop(self, grace):
        self._health.enter_graceful_shutdown()
        event = self._inner.stop(grace)
        self.watchdog.stop()
        return event

    def wait_for_termination(self, timeout=None):
        return self._inner.wait_for_termination(timeout)


def create_server(listen_addr: str, config: Config) -> tuple[CollectorServer, int]:
    """Build the collector and bind ``listen_addr`` only; returns (server, port).

    The server is not started. Raises ConfigError (one line) if the address
    is malformed or cannot be bound.
    """
    parse_listen(listen_addr)
    state, registry, events = JobState(), SessionRegistry(config.max_agents), EventStore(config)
    timelines = TimelineGatherer(config.job_id, registry)
    watchdog = Watchdog(config, state, registry, events, timelines=timelines)
    rpc_limit = config.max_agents + SPARE_THREADS
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=rpc_limit, thread_name_prefix="collector-rpc")
    inner = grpc.server(pool, interceptors=[TokenInterceptor(config.token)], maximum_concurrent_rpcs=rpc_limit,
                        options=[("grpc.max_receive_message_length", config.max_dump_bytes + (1 << 20)),
                                 ("grpc.so_reuseport", 0),
                                 # When every agent of a big job connects at once, the one Python thread
                                 # that accepts calls falls behind; grpc core's default of 1000 pending
                                 # calls would cancel the rest. Allow one per agent.
                                 ("grpc.server.max_pending_requests", rpc_limit),
                                 ("grpc.server.max_pending_requests_hard_limit", 2 * rpc_limit),
                                 # Ping agents so a vanished host frees its stream thread, and let
                                 # agents keep their connection alive with pings of their own.
                                 ("grpc.keepalive_time_ms", 30_000), ("grpc.keepalive_timeout_ms", 10_000),
                                 ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                                 ("grpc.http2.max_ping_strikes", 0),
                                 # Bandwidth-delay probing pings every stream's peer as data arrives:
                                 # measured ~70 us of collector CPU per report (docs/collector.md,
                                 # Scale), for windows that 5 KB reports never fill.
                                 ("grpc.http2.bdp_probe", 0)])
    pb_grpc.add_CollectorServicer_to_server(CollectorServicer(config, state, registry, events, timelines), inner)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, inner)
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    try:
        port = inner.add_insecure_port(listen_addr)
    except RuntimeError:
        port = 0
    if not port:
        raise ConfigError(f"--listen: cannot bind {listen_addr!r} (address in use or not local); pick another HOST:PORT")
    return CollectorServer(inner, config, state, registry, events, watchdog, health_servicer), port


def bound_address(listen_addr: str, port: int) -> str:
    host, _ = parse_listen(listen_addr)
    return f"{host}:{port}"


def serve(config: Config, stop: threading.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT (or ``stop`` is set); returns the exit code."""
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
    log.info("stopped (%d node reports ingested)", server.state.reports)
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
