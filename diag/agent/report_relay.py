"""The report relay this node's agent serves when the collector asks
(ServeRelay, --nodes-per-relay; docs/collector.md "Report relays").

The relay is ``python -m diag.collector.ingest`` in relay mode, a child of the
agent (it dies with it, --parent-pid): it binds this host's address on the route to the
collector (where the job already talks to it), links to the collector with
the job token and takes its group's Connect streams. The agent itself then
reports through it like the rest of its group, when the collector says so.
One relay per agent at most; one that exits is not restarted here: the
collector forgets it and asks an agent of the group again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from diag.common import envnames
from diag.common.net import resolve_ipv4, route_source

# A report a second from each of the group's nodes: gathered this long, the
# collector gets a message of ~N reports every 2 s, each node's newest plain
# report of the two (ingest.coalesced; docs/collector.md "Report relays"). A
# plain report has no op in flight for URGENT_S: nothing a verdict waits for.
BATCH_S = 2.0
# A report with an op in flight this long goes up at once (the collector's
# index takes ops from 1 s in flight): the HANG line never waits for a batch.
URGENT_S = 1.0
MAX_DUMP_BYTES = 64 << 20   # message size limit only: dumps go to the collector, not through the relay


def bind_host(collector: str) -> str:
    """This host's address on its route to ``collector`` (HOST:PORT)."""
    host = collector.rsplit(":", 1)[0].strip("[]")
    return route_source(resolve_ipv4(host))


class ReportRelay:
    def __init__(self, config, log) -> None:
        self._config = config
        self._log = log
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def serve(self, request) -> None:
        """Start the relay for ``request.group`` unless one runs; never raises."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            try:
                host = bind_host(self._config.collector)
                cmd = [sys.executable, "-m", "diag.collector.ingest", "--listen", f"{host}:0",
                       "--link", self._config.collector, "--group", str(request.group),
                       "--max-agents", str(max(1, request.nodes)), "--max-dump-bytes", str(MAX_DUMP_BYTES),
                       "--batch-s", str(BATCH_S), "--urgent-s", str(URGENT_S), "--parent-pid", str(os.getpid())]
                env = dict(os.environ, **{envnames.JOB_TOKEN: self._config.token})
                env.pop("LD_PRELOAD", None)
                # No preexec_fn: this process runs gRPC's threads, and a plain
                # fork would run gRPC's fork handlers; the relay arranges to
                # die with us itself (--parent-pid).
                self._proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
            except (OSError, ValueError) as exc:
                self._log(f"cannot serve the report relay of group {request.group}: {exc}; "
                          f"this group reports to the collector directly", every=0)
                return
            self._log(f"serving the report relay of nodes {request.group * request.nodes}-"
                      f"{(request.group + 1) * request.nodes - 1} on {host} (pid {self._proc.pid})", every=0)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def stop(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
