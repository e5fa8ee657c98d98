"""One Prometheus /metrics endpoint: the agent's (diag/perf/metrics.py) and
the collector's (diag/collector/metrics.py) start and stop theirs alike and
say in the same words why one is not served."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server


class MetricsEndpoint:
    """Owns the HTTP server of one /metrics over ``collector``.

    ``what`` names the endpoint, ``goes_on`` what carries on without it and
    ``option`` the port's option, for the line :meth:`start` returns."""

    def __init__(self, collector, what: str, goes_on: str, option: str) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.server = None
        self.port = None
        self._what, self._goes_on, self._option = what, goes_on, option

    def start(self, addr: str, port: int) -> str | None:
        """Bind and serve; None, or one line saying why not (the caller warns
        once and goes on: nothing waits on metrics)."""
        try:
            self.server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        except (OSError, ValueError) as exc:
            why = getattr(exc, "strerror", None) or exc
            return (f"{self._what} {addr}:{port} not served ({why}); {self._goes_on}; "
                    f"pick another {self._option} / --metrics-addr")
        self.port = self.server.server_address[1]
        return None

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
