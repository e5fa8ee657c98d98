"""Collector ingest benchmark: N simulated agents against a real collector.

The collector runs as its own process (``python -m diag.collector``) on
loopback; this process (or --drivers N processes) drives N agents (8 ranks
each, one NodeReport a second, phases staggered), each its own Connect stream,
from asyncio loops with pre-serialised reports. It prints the sustained
node-reports/s (sent, and ingested by the collector), the collector's CPU
share read from /proc/<pid>/stat, its memory, how far behind it ran and any
OVERLOAD lines, and, while the load runs, the hang-detection latency: one
agent reports a rank stalled in all_reduce and we time the HANG line and the
DumpStacks command against the moment the stall crossed the timeout.

The simulated agents act as agents of this release do: each report carries
``sent_mono_ns`` (--old-agents: not), and they obey ReportPace (report less
often, the perf window with one report in N).

File descriptors: the collector holds one socket per connection. The bench
raises the soft limit to the hard one (in the collector too), and when the
hard limit is too low for one connection per agent it puts several agents'
streams on one connection (``--streams-per-connection``, chosen and printed).

    .venv/bin/python bench/collector_ingest.py --agents 2000 --seconds 20
    .venv/bin/python bench/collector_ingest.py --agents 2000 --collector-tree /tmp/old   # another release's collector
    .venv/bin/python bench/collector_ingest.py --agents 2000 --transport-floor   # the collector, then bench/grpc_floor_server.py
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing
import os
import math
import re
import resource
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from types import SimpleNamespace

import grpc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repo root, uninstalled

from diag.agent.config import AgentConfig  # noqa: E402
from diag.agent.connection import HEALTHY_AFTER, MOVE_WAIT_S, bounded_pace  # noqa: E402
from diag.agent.report_relay import BATCH_S as RELAY_BATCH_S, ReportRelay  # noqa: E402
from diag.collector.digest import digest  # noqa: E402
from diag.collector.relay_board import PERF_EVERY as RELAY_PERF_EVERY, RELAY_METADATA  # noqa: E402
from diag.common import envnames, handshake  # noqa: E402
from diag.pb import collector_pb2 as pb  # noqa: E402
from diag.pb import ingest_pb2 as ipb  # noqa: E402

RANKS_PER_AGENT = 8
TARGET_REPORTS_PER_S = 2000.0
STATS_LINE = re.compile(r"ingest: (\d+) reports total, [0-9.]+/s over the last ([0-9.]+) s"
                        r"(?:.*; ([0-9.]+) s behind)?(?:; (\d+) of them coalesced)?")
BACKOFF_MIN_S, BACKOFF_MAX_S = AgentConfig.backoff_min, AgentConfig.backoff_max   # an agent's own
FDS_SPARE = 256   # beyond the sockets: files, pipes, gRPC's own


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=int, default=2000, help="simulated agents (8 ranks each)")
    p.add_argument("--seconds", type=float, default=20.0, help="measured window after all agents connected")
    p.add_argument("--interval", type=float, default=1.0, help="report interval per agent")
    p.add_argument("--no-perf", action="store_true", help="reports without the performance window (the old load)")
    p.add_argument("--hang-timeout", type=float, default=5.0, help="collector --hang-timeout for the latency probe")
    p.add_argument("--fingerprints", action="store_true",
                   help="every rank sends a 64-op fingerprint window (the reports of a job-wide stall)")
    p.add_argument("--drivers", type=int, default=1,
                   help="driver processes, each serving a slice of the agents (12,500 agents need several)")
    p.add_argument("--streams-per-connection", type=int, default=0,
                   help="agents' streams sharing one connection (0: one each, unless the file limit forbids)")
    p.add_argument("--verbose", action="store_true", help="print the collector's last lines")
    p.add_argument("--collector-log", default=None,
                   help="write every line the collector printed here, each with the bench's clock")
    p.add_argument("--old-agents", action="store_true",
                   help="agents that send no sent_mono_ns and ignore ReportPace (the previous release's)")
    p.add_argument("--ingest-procs", type=int, default=0,
                   help="the collector's --ingest-procs (its CPU and memory then count them too)")
    p.add_argument("--nodes-per-relay", type=int, default=0,
                   help="the collector's --nodes-per-relay: the simulated agents serve and use report relays as "
                        "agents do (diag/agent/report_relay.py); the relays' CPU is printed apart")
    p.add_argument("--simulated-relays", action="store_true",
                   help="with --nodes-per-relay: drive the collector's relay links directly (one stream per group, "
                        "the reports a relay would send); the collector's side at 12,500 agents on a small machine")
    p.add_argument("--batch-s", type=float, default=RELAY_BATCH_S, help="--simulated-relays: a relay's batch window")
    p.add_argument("--old-relays", action="store_true",
                   help="--simulated-relays: send no digests, as relays before digest.py did (the judge parses every "
                        "report at once)")
    p.add_argument("--transport-floor", action="store_true",
                   help="then drive bench/grpc_floor_server.py (reads the reports, does nothing) with the same "
                        "load, and print the collector's CPU per report against that floor")
    p.add_argument("--collector-tree", default=None,
                   help="run the collector from this source tree (e.g. an older release unpacked with git archive)")
    p.add_argument("--collector-cores", type=int, default=0,
                   help="give the collector this many physical cores of its own (each with its SMT siblings) and "
                        "the drivers and relays the rest: on one host the simulated fleet otherwise competes with "
                        "the collector it measures, which on a real job runs on other nodes")
    return p.parse_args(argv)


def split_cpus(cores: int) -> tuple[set[int], set[int]] | None:
    """(the collector's CPUs, the fleet's): the first ``cores`` physical cores
    with their SMT siblings, and every other CPU this process may use."""
    if cores <= 0:
        return None
    allowed = os.sched_getaffinity(0)
    by_core: dict[tuple[str, str], set[int]] = {}
    for cpu in sorted(allowed):
        topo = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(topo + "physical_package_id") as f, open(topo + "core_id") as g:
                core = (f.read().strip(), g.read().strip())
        except OSError:
            core = (str(cpu), "")
        by_core.setdefault(core, set()).add(cpu)
    mine = set().union(*list(by_core.values())[:cores])
    rest = allowed - mine
    if not rest:
        raise SystemExit(f"--collector-cores {cores}: this host has no CPU left for the agents; use fewer")
    return mine, rest


def raise_fd_limit() -> int:
    """Raise the soft file limit to the hard one; returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def plan_fds(args) -> str:
    """Pick streams per connection and drivers so that the collector (one
    socket per connection) and each driver stay inside the file limit."""
    limit = raise_fd_limit()
    room = max(64, limit - FDS_SPARE)
    if args.streams_per_connection <= 0:
        args.streams_per_connection = max(1, math.ceil(args.agents / room))
    connections = math.ceil(args.agents / args.streams_per_connection)
    if connections > room:
        raise SystemExit(f"{connections} connections need {connections + FDS_SPARE} file descriptors in the "
                         f"collector, the limit is {limit}; use --streams-per-connection "
                         f"{math.ceil(args.agents / room)}")
    args.drivers = max(args.drivers, math.ceil(connections / room))
    return (f"file limit {limit}: {connections} connections ({args.streams_per_connection} agent stream(s) each), "
            f"{connections + FDS_SPARE} fds needed in the collector, about "
            f"{math.ceil(connections / args.drivers) + FDS_SPARE} in each of {args.drivers} driver(s)")


def children(pid: int) -> list[int]:
    """``pid``'s child processes (the collector's ingest processes)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def cpu_seconds(pid: int, children_too: bool = True) -> float:
    """utime + stime of ``pid`` (all its threads) and of its running children, from /proc/<pid>/stat."""
    total = 0.0
    for p in [pid, *(children(pid) if children_too else ())]:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rss_mib(pid: int) -> float:
    """The collector's resident memory (VmRSS), MiB, its ingest processes' included."""
    return sum(_rss_mib(p) for p in [pid, *children(pid)])


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024


def start_collector(workdir: str, token: str, args, floor: bool = False) -> tuple[subprocess.Popen, str, dict]:
    addr_file = os.path.join(workdir, "addr")
    cmd = [sys.executable, "-m", "diag.collector", "--listen", "127.0.0.1:0", "--job-id", "bench",
           "--timeline-path", os.path.join(workdir, "tl"), "--address-file", addr_file,
           "--hang-timeout", f"{args.hang_timeout}s", "--silent-after", "30s",
           "--max-agents", str(args.agents + 16), "--stats-interval", "1s"]
    if args.ingest_procs:
        cmd += ["--ingest-procs", str(args.ingest_procs)]
    if args.nodes_per_relay:
        cmd += ["--nodes-per-relay", str(args.nodes_per_relay)]
    if floor:
        cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "grpc_floor_server.py"),
               "--address-file", addr_file, "--max-agents", str(args.agents + 16)]
    env = {**os.environ, envnames.JOB_TOKEN: token}
    split = split_cpus(args.collector_cores)

    def set_up():
        raise_fd_limit()
        if split:
            os.sched_setaffinity(0, split[0])

    if split:   # the fleet (this process, its drivers, their relays) keeps off the collector's cores
        os.sched_setaffinity(0, split[1])
        print(f"  cpus                collector on {sorted(split[0])}, the agents and relays on the other "
              f"{len(split[1])}", flush=True)
    if args.collector_tree:   # first on the path; what the rest needs (a host's own site dirs) after it
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(args.collector_tree),
                                                        os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, preexec_fn=set_up,
                            cwd=os.path.abspath(args.collector_tree) if args.collector_tree else None)
    seen: dict = {"lines": [], "timed": []}

    seen["stats"] = []  # (time read, reports so far, seconds since its previous line), the collector's own count

    def read_stderr():  # timestamp the verdict and stats lines as the collector prints them
        for line in proc.stderr:
            if line.startswith("HANG: ") and "hang_at" not in seen:
                seen["hang_at"] = time.monotonic()
            if line.startswith("OVERLOAD"):
                seen.setdefault("overload", []).append((time.monotonic(), line.rstrip()))
            match = STATS_LINE.search(line)
            if match:
                seen["stats"].append((time.monotonic(), int(match.group(1)), float(match.group(2)),
                                      float(match.group(3) or 0)))
                seen["coalesced"] = int(match.group(4) or 0)
            seen["lines"].append(line.rstrip())
            seen["timed"].append((time.monotonic(), line.rstrip()))

    threading.Thread(target=read_stderr, daemon=True).start()
    deadline = time.monotonic() + 60
    while not os.path.exists(addr_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"collector did not start: {seen['lines'][-3:]}")
        time.sleep(0.05)
    with open(addr_file) as f:
        return proc, f.read().strip(), seen


def perf_window() -> pb.PerfRank:
    """A rank's performance window as an agent of a GPT-2 job sends it (docs/metrics.md):
    5 ops with percentiles, every report (the cumulative totals stay on the agent)."""
    perf = pb.PerfRank(window_s=60.0, launches=1_200_000, steps=600, step_ns=60_000_000_000,
                       last_step_ns=100_000_000, step_name="optimizer.step",
                       launches_total=9_000_000, steps_total=4500)
    for name, kind in (("cublasGemmEx", pb.OP_KIND_GEMM), ("cublasLtMatmul", pb.OP_KIND_GEMM),
                       ("ncclAllReduce", pb.OP_KIND_COLLECTIVE), ("ncclAllGather", pb.OP_KIND_COLLECTIVE),
                       ("optimizer.step", pb.OP_KIND_HOST_FUNC)):
        perf.ops.add(name=name, kind=kind, producer=pb.PRODUCER_HOOK, comm_id=0x1234567890abcdef,
                     comm_size=16, count=150_000, timed_count=18_750, timed_ns=9_000_000_000,
                     bytes=1 << 40, timed_bytes=1 << 37, flops=1 << 50, timed_flops=1 << 47,
                     p50_ns=450_000, p99_ns=2_100_000, max_ns=9_000_000)
    return perf


PERF = perf_window()
FINGERPRINTS = False   # --fingerprints: every rank carries a 64-op window (what a job-wide stall sends)


def make_report(node: int, world: int, stall_since: float | None, now: float, perf: bool = True,
                idle_since: float | None = None) -> pb.NodeReport:
    """Node ``node``'s report at ``now``: its ranks at seq 100, done; from
    ``stall_since`` (node 0) all but local rank 3 in all_reduce seq 101.
    ``idle_since``: the ranks not in it have done nothing since (a job that
    stopped there); without it they report no idle time (ops keep ending)."""
    ranks = []
    for local in range(RANKS_PER_AGENT):
        rank = node * RANKS_PER_AGENT + local
        r = pb.RankProgress(rank=rank, local_rank=local, world_size=world, pid=10000 + rank, alive=True,
                            last_op="all_reduce")
        r.comms.add(comm_id=0, last_started_seq=100, last_completed_seq=100, comm_size=world,
                    lane=pb.OP_KIND_COLLECTIVE, group_name="default")
        r.stats.add(name="all_reduce", kind=pb.OP_KIND_COLLECTIVE, count=10, total_ns=5_000_000, max_ns=900_000)
        if PERF is not None and perf:
            r.perf.CopyFrom(PERF)
        if FINGERPRINTS:
            r.comms[0].recent.first_seq = 37
            r.comms[0].recent.ops.extend(pb.Fingerprint(name="ncclAllReduce", bytes=98 << 20, dtype=9, reduce_op=0,
                                                         peer=-1) for _ in range(64))
        if stall_since is not None and local != 3:  # local rank 3 is the culprit: not in the collective
            r.oldest_in_flight.CopyFrom(pb.InFlightOp(name="all_reduce", kind=pb.OP_KIND_COLLECTIVE, comm_id=0,
                                                      seq=101, age_ns=int((now - stall_since) * 1e9)))
        elif idle_since is not None:
            r.idle_ns = int(max(0.0, now - idle_since) * 1e9)
        ranks.append(r)
    return pb.NodeReport(job_id="bench", node_rank=node, hostname=f"sim{node}", agent_pid=20000 + node,
                         ranks=ranks, local_world_size=RANKS_PER_AGENT)


def stamped(payload: bytes, at_ns: int | None = None) -> bytes:
    """``payload`` with NodeReport.sent_mono_ns (field 8, varint) appended: a
    serialised message followed by a field is that message with the field set."""
    n, out = time.monotonic_ns() if at_ns is None else at_ns, bytearray(b"\x40")
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return payload + bytes(out)


def _session(address: str, token: str) -> tuple:
    """The handshake once (diag/common/handshake.py): the credential is good
    at the collector and at any relay of the job, which check it with the token."""
    with grpc.insecure_channel(address) as channel:
        return handshake.session_metadata(channel, token, address, timeout=60)


class Load:
    def __init__(self, address: str, token: str, args):
        self.address, self.args, self.token = address, args, token
        self.metadata = _session(address, token)
        self.world = args.agents * RANKS_PER_AGENT
        self.sent = 0
        self.connected = 0
        self.relayed = 0                         # agents whose stream goes through a relay now
        self.relays: dict[int, ReportRelay] = {}  # node -> the relay it serves (ServeRelay)
        self.errors: list[str] = []
        self.stall_since: float | None = None    # agent 0 reports a stall from then on
        self.dump_at: float | None = None
        self.paced = 0                           # ReportPace commands obeyed
        self.probe_write_s = 0.0                 # longest write of agent 0
        self.stop = asyncio.Event()
        self._channels: dict[int, grpc.aio.Channel] = {}
        # node -> where its agent is (a run whose agents do not all reach their
        # relay prints these while it waits: which step they are stuck at)
        self.phase: dict[int, str] = {}
        self.failed = 0  # streams that ended under the agent (connected again, as an agent does)
        # "direct CANCELLED after 3 reports" -> streams: how they failed, and
        # whether reports had gone out on them (which the run may count lost)
        self.failures: collections.Counter = collections.Counter()

    def channel(self, node: int, via: str | None = None):
        """Agents node // K share one connection (K = --streams-per-connection);
        through a relay, this driver's agents of its group share one."""
        key = via or node // max(1, self.args.streams_per_connection)
        if key not in self._channels:
            self._channels[key] = grpc.aio.insecure_channel(via or self.address,
                                                            options=[("grpc.use_local_subchannel_pool", 1)])
        return self._channels[key]

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._channels.values()), return_exceptions=True)
        # All at once: each sends what it holds up before it exits (a second or so).
        await asyncio.gather(*(asyncio.to_thread(r.stop) for r in self.relays.values()))

    def tasks(self, lo: int = 0, hi: int | None = None) -> list:
        """Agents lo..hi (all by default), their phases spread over an interval."""
        args = self.args
        return [asyncio.ensure_future(self.agent(n, args.interval * n / args.agents))
                for n in range(lo, args.agents if hi is None else hi)]

    async def agent(self, node: int, phase: float) -> None:
        """One agent: its stream to the collector, and under --nodes-per-relay
        the stream through its group's relay once told (as connection.py)."""
        route = {"via": None, "moving": False, "perf_every": 1, "failed": False, "sent": 0}
        await asyncio.sleep(phase)
        first, backoff = True, BACKOFF_MIN_S
        while not self.stop.is_set():
            began = time.monotonic()
            await self._stream(node, route, first)
            first = False
            if route["failed"]:   # as connection.py: back off, then connect again
                route["failed"] = False
                if time.monotonic() - began > HEALTHY_AFTER:
                    backoff = BACKOFF_MIN_S
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, BACKOFF_MAX_S)
                continue
            if not route["moving"]:
                return
            route["moving"] = False

    async def _stream(self, node: int, route: dict, first: bool) -> None:
        # Pre-serialized reports (bytes pass through a None serializer): the
        # load generator must not be the bottleneck on a 2-core machine.
        via = route["via"]
        connect = self.channel(node, via).stream_stream("/diag.pb.Collector/Connect", request_serializer=None,
                                                        response_deserializer=pb.Command.FromString)
        call = connect(metadata=self.metadata)
        pace = {"interval": self.args.interval, "perf_every": route["perf_every"]}
        reader = asyncio.ensure_future(self.read(call, node, pace, route))
        full = make_report(node, self.world, None, 0.0).SerializeToString()
        bare = make_report(node, self.world, None, 0.0, perf=False).SerializeToString()
        relayed = False
        where = "relay" if via is not None else "direct"
        route["sent"] = 0   # reports out on this stream
        try:
            self.phase[node] = f"{where}: awaiting headers"
            await call.initial_metadata()   # the collector sends headers once it serves the stream
            self.connected += first
            relayed = via is not None
            self.relayed += relayed
            next_at, n = time.monotonic(), 0
            while not self.stop.is_set() and not route["moving"]:
                with_perf = n % pace["perf_every"] == 0
                payload = full if with_perf else bare
                if self.stall_since is not None:   # the job stopped: ranks report their idle time (or the stall)
                    payload = make_report(node, self.world, self.stall_since if node == 0 else None,
                                          time.monotonic(), perf=with_perf,
                                          idle_since=self.stall_since).SerializeToString()
                began = time.monotonic()
                self.phase[node] = f"{where}: writing"
                await call.write(payload if self.args.old_agents else stamped(payload))
                self.phase[node] = f"{where}: reporting"
                if node == 0:   # the prober: how long its writes wait (a blocked stream shows here)
                    self.probe_write_s = max(self.probe_write_s, time.monotonic() - began)
                self.sent += 1
                route["sent"] += 1
                n += 1
                next_at = max(next_at + pace["interval"], time.monotonic() - pace["interval"])
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            await call.done_writing()
            # The collector ends the stream once it has read every report; a
            # move (RelayVia) waits as connection.py does, then goes anyway.
            if route["moving"]:
                self.phase[node] = f"{where}: moving"
                await asyncio.wait([reader], timeout=MOVE_WAIT_S)
                return
            await asyncio.wait_for(asyncio.shield(reader), timeout=60)
        except (grpc.RpcError, asyncio.InvalidStateError) as exc:
            # The call ended under us (refused, or cancelled by the collector's
            # gRPC before its handler ran: the connection storm). An agent
            # connects again; this one would have died silently.
            self.phase[node] = f"{where}: failed"
            if not self.stop.is_set():
                self.failed += 1
                code = exc.code().name if isinstance(exc, grpc.RpcError) else type(exc).__name__
                self.failures[f"{where} {code} " + ("after reports" if route["sent"] else "before any report")] += 1
                if via is not None:
                    route["via"], route["moving"] = None, True   # back to the collector directly, at once
                else:
                    route["failed"] = True
        except asyncio.TimeoutError as exc:
            self.phase[node] = f"{where}: failed"
            self.errors.append(f"agent {node}: {exc!r:.200}")
        finally:
            self.relayed -= relayed
            call.cancel()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def read(self, call, node: int, pace: dict, route: dict) -> None:
        try:
            async for command in call:
                which = command.WhichOneof("command")
                if which == "serve_relay":   # as diag/agent/connection.py, with the agent's own relay class
                    relay = self.relays.setdefault(node, ReportRelay(SimpleNamespace(
                        collector=self.address, token=self.token), lambda *a, **k: None))
                    relay.serve(command.serve_relay)
                elif which == "relay_via" and command.relay_via.address != route["via"]:
                    # The writer half-closes; this reads on until the collector ends the stream.
                    route["via"], route["moving"] = command.relay_via.address, True
                    route["perf_every"] = max(1, command.relay_via.perf_every)
                if which == "dump_stacks" and node == 0 and self.dump_at is None:
                    self.dump_at = time.monotonic()
                elif which == "report_pace" and not self.args.old_agents:   # as diag/agent/connection.py
                    pace["interval"], pace["perf_every"] = bounded_pace(self.args.interval, route["perf_every"],
                                                                        command.report_pace)
                    self.paced += 1
        except grpc.RpcError:   # the call ended: the writer sees it too, and connects again
            pass


class RelayLoad:
    """--simulated-relays: the collector's side of --nodes-per-relay at any
    scale on a small machine. One IngestLink stream per group of N agents
    sends what a relay (diag/collector/ingest.py) sends: every --batch-s, the
    pre-serialised reports of the group's agents that came due, with how long
    each was held; commands come down per agent (DumpStacks, ReportPace).
    What the relays themselves cost runs on the agents' nodes in a real job
    and is measured by the plain --nodes-per-relay run."""

    def __init__(self, address: str, token: str, args):
        self.address, self.args = address, args
        self.metadata = _session(address, token)
        self.world = args.agents * RANKS_PER_AGENT
        self.sent = self.connected = self.relayed = self.paced = self.failed = 0
        self.errors: list[str] = []
        self.stall_since: float | None = None
        self.dump_at: float | None = None
        self.stop = asyncio.Event()
        self.late_s = 0.0   # the driver's own lateness: a batch sent this much after its time

    def tasks(self) -> list:
        n = self.args.nodes_per_relay
        return [asyncio.ensure_future(self.relay(g, range(g * n, min((g + 1) * n, self.args.agents))))
                for g in range(math.ceil(self.args.agents / n))]

    async def relay(self, group: int, nodes: range) -> None:
        args = self.args
        channel = grpc.aio.insecure_channel(self.address, options=[("grpc.max_send_message_length", 64 << 20)])
        relay_of = (RELAY_METADATA, f"{group}@127.0.0.1:{1 + group % 60000}")   # an address no agent is sent to
        call = channel.stream_stream("/diag.pb.IngestLink/Relay", request_serializer=ipb.RelayUp.SerializeToString,
                                     response_deserializer=ipb.RelayDown.FromString)(metadata=self.metadata + (relay_of,))
        # interval, perf_every, reports sent: as agents told RelayVia(perf_every) send
        pace = {node: [args.interval, RELAY_PERF_EVERY, 0] for node in nodes}
        reader = asyncio.ensure_future(self.read(call, pace))
        full = {node: make_report(node, self.world, None, 0.0).SerializeToString() for node in nodes}
        bare = {node: make_report(node, self.world, None, 0.0, perf=False).SerializeToString() for node in nodes}
        # What a relay of this release reads of each plain report (digest.py), stamped per report below.
        digests = {(node, with_perf): digest(pb.NodeReport.FromString((full if with_perf else bare)[node]))
                   for node in nodes for with_perf in (True, False)}
        due = {node: time.monotonic() + args.interval * node / args.agents for node in nodes}
        first = True
        try:
            while not self.stop.is_set():
                wait = args.batch_s
                if 0 in due and self.stall_since is not None:   # a relay sends a stalled op's report at once (ingest.py)
                    wait = min(wait, max(0.0, due[0] - time.monotonic()))
                woke = time.monotonic() + wait
                await asyncio.sleep(wait)
                now, up = time.monotonic(), ipb.RelayUp()
                self.late_s = max(self.late_s, now - woke)
                for node in nodes:
                    if due[node] > now:
                        continue
                    interval, every, n = pace[node]
                    with_perf = n % every == 0
                    payload = full[node] if with_perf else bare[node]
                    read = None if args.old_relays else digests[node, with_perf]
                    if node == 0 and self.stall_since is not None:
                        report = make_report(0, self.world, self.stall_since, now, perf=with_perf)
                        payload, read = report.SerializeToString(), None if args.old_relays else digest(report)
                    # Built by its agent when due, then held by the relay until now.
                    sent_ns = int(due[node] * 1e9)
                    relayed = up.reports.add(stream=node + 1, report=stamped(payload, sent_ns),
                                             held_us=int(1e6 * min(now - due[node], args.batch_s)))
                    if read is not None:
                        relayed.digest.CopyFrom(read)
                        relayed.digest.sent_mono_ns = sent_ns
                    pace[node][2] += 1
                    due[node] = max(due[node] + interval, now - interval)
                if up.reports:
                    await call.write(up)
                    self.sent += len(up.reports)
                    if first:
                        self.connected += len(nodes)
                        self.relayed += len(nodes)
                        first = False
            await call.done_writing()
            await asyncio.wait_for(asyncio.shield(reader), timeout=60)
        except (grpc.RpcError, asyncio.TimeoutError) as exc:
            self.errors.append(f"relay {group}: {exc!r:.200}")
        finally:
            call.cancel()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await channel.close()

    async def read(self, call, pace: dict) -> None:
        try:
            async for down in call:
                for relayed in down.commands:
                    node = relayed.stream - 1
                    if relayed.abort_code:
                        self.errors.append(f"agent {node}: aborted {relayed.abort_message}")
                        continue
                    command = pb.Command.FromString(relayed.command)
                    which = command.WhichOneof("command")
                    if which == "dump_stacks" and node == 0 and self.dump_at is None:
                        self.dump_at = time.monotonic()
                    elif which == "report_pace" and node in pace:   # as diag/agent/connection.py
                        pace[node][:2] = bounded_pace(self.args.interval, RELAY_PERF_EVERY, command.report_pace)
                        self.paced += 1
        except grpc.RpcError as exc:
            if not self.stop.is_set():
                self.errors.append(f"relay (commands): {exc.code().name} {exc.details()}")

    async def close(self) -> None:
        pass


async def settle(seen: dict, limit_s: float = 90.0) -> None:
    """If the connection storm overloaded the collector, measure from when it
    says it caught up (the agents are back at their own pace)."""
    deadline = time.monotonic() + limit_s
    while len(seen.get("overload", [])) % 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    seen["window_overload"] = len(seen.get("overload", []))


async def _window(load, proc: subprocess.Popen, seen: dict, args) -> tuple:
    """Wait for every stream, let the agents settle into their phases, then
    measure one window with a rank stalling at its middle. Returns (t0, t1,
    reports, cpu, rss, connect_s); the agents are told to stop."""
    began, deadline = time.monotonic(), time.monotonic() + 120 + args.agents / 200
    while load.connected < args.agents and not load.errors and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    # Every agent through its group's relay. Not cut short by an agent's error
    # (it fails the run anyway): at 12,500 agents one CANCELLED stream started
    # the window with 4,000 agents not yet relayed.
    while args.nodes_per_relay and load.relayed < args.agents and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    connect_s, relayed = time.monotonic() - began, load.relayed
    await asyncio.sleep(2 * args.interval)
    await settle(seen)
    print("  the window starts", file=sys.stderr, flush=True)   # session.sh's profiling labels wait for it
    t0, sent0, cpu0, judge0 = time.monotonic(), load.sent, cpu_seconds(proc.pid), cpu_seconds(proc.pid, False)
    relays0 = relay_cpu_seconds()
    stall_at = args.seconds / 2 - args.hang_timeout
    # The window's healthy part: the collector's steady cost, before the stall's
    # probes and declaration; second by second too, since a pass that comes once
    # in 100 s at this size (SLOW's) would weigh as much as the rest in 20 s.
    seconds = []

    async def each_second():
        while True:
            await asyncio.sleep(1.0)
            seconds.append((time.monotonic(), cpu_seconds(proc.pid)))

    sampler = asyncio.ensure_future(each_second())
    await asyncio.sleep(max(0.0, stall_at))
    sampler.cancel()
    healthy = (time.monotonic() - t0, load.sent - sent0, cpu_seconds(proc.pid) - cpu0,
               [(c1 - c0) / (b - a) for (a, c0), (b, c1) in zip([(t0, cpu0)] + seconds, seconds)])
    load.stall_since = time.monotonic()
    await asyncio.sleep(args.seconds - max(0.0, stall_at))
    t1, sent1, cpu1, judge1 = time.monotonic(), load.sent, cpu_seconds(proc.pid), cpu_seconds(proc.pid, False)
    relays1 = relay_cpu_seconds()
    rss = rss_mib(proc.pid)
    load.stop.set()
    return (t0, t1, sent1 - sent0, (cpu1 - cpu0, judge1 - judge0, relays1[0] - relays0[0], relays1[1], relays1[2]), rss,
            connect_s, relayed, healthy)


async def drive(load, proc: subprocess.Popen, seen: dict, args) -> dict:
    tasks = load.tasks()
    t0, t1, reports, cpu, rss, connect_s, relayed, healthy = await _window(load, proc, seen, args)
    await asyncio.gather(*tasks, return_exceptions=True)
    await counted(seen, load.sent)   # before the relays stop: see _drive_slice
    await load.close()
    return dict(wall=t1 - t0, reports=reports, cpu=cpu[0], judge_cpu=cpu[1], relay_cpu=cpu[2], relays=cpu[3],
                relay_rss=cpu[4], t0=t0, t1=t1, rss=rss, connect_s=connect_s, connected=load.connected, relayed=relayed,
                failed=load.failed, healthy=healthy)


def relay_cpu_seconds() -> tuple[float, int, float]:
    """(CPU seconds, count, resident MiB) of the report relays running on this
    host: in the bench they are the simulated agents' children, on a real job
    each on its own node."""
    total, count, rss = 0.0, 0, 0.0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if b"diag.collector.ingest" in cmd and b"--group" in cmd:
            total += cpu_seconds(int(name), children_too=False)
            count += 1
            try:
                rss += _rss_mib(int(name))
            except (OSError, StopIteration):
                pass
    return total, count, rss


class Drivers:
    """--drivers N: the agents split over N processes; the same view as a Load
    (sent, connected, errors, stall_since, dump_at, stop) from shared counters."""

    def __init__(self, address: str, token: str, args):
        ctx = multiprocessing.get_context("spawn")   # no gRPC state crosses a fork
        n = args.drivers
        self._sent, self._conn, self._err = ctx.Array("q", n), ctx.Array("q", n), ctx.Array("q", n)
        self._paced, self._relayed, self._failed = ctx.Array("q", n), ctx.Array("q", n), ctx.Array("q", n)
        self._stall, self._dump, self._stop = ctx.Value("d", 0.0), ctx.Value("d", 0.0), ctx.Event()
        self._first = ctx.Queue()
        self._written = ctx.Barrier(n)   # every driver's agents have ended their streams
        self._ended = ctx.Value("i", 0)  # drivers whose count of reports sent is final
        self._flushed = ctx.Event()      # the collector counted them all (or gave up): the relays may stop
        cuts = [args.agents * i // n for i in range(n + 1)]
        shared = (self._sent, self._conn, self._err, self._stall, self._dump, self._stop, self._first, self._paced,
                  self._relayed, self._failed, self._written, self._ended, self._flushed)
        self.procs = [ctx.Process(target=driver_main, args=(address, token, args, i, cuts[i], cuts[i + 1], shared),
                                  daemon=True) for i in range(n)]
        self.stop = self._stop
        self._errors: list[str] = []

    sent = property(lambda self: sum(self._sent[:]))
    connected = property(lambda self: sum(self._conn[:]))
    paced = property(lambda self: sum(self._paced[:]))
    relayed = property(lambda self: sum(self._relayed[:]))
    failed = property(lambda self: sum(self._failed[:]))
    ended = property(lambda self: self._ended.value)
    flushed = property(lambda self: self._flushed)
    dump_at = property(lambda self: self._dump.value or None)

    @property
    def errors(self) -> list[str]:
        while not self._first.empty():
            self._errors.append(self._first.get())
        return self._errors if self._errors or not sum(self._err[:]) else [f"{sum(self._err[:])} errors"]

    @property
    def stall_since(self):
        return self._stall.value or None

    @stall_since.setter
    def stall_since(self, value: float) -> None:
        self._stall.value = value


def driver_main(address, token, args, index, lo, hi, shared) -> None:
    global FINGERPRINTS, PERF
    PERF, FINGERPRINTS = (None if args.no_perf else PERF), args.fingerprints
    asyncio.run(_drive_slice(Load(address, token, args), index, lo, hi, shared))


async def _drive_slice(load: Load, index: int, lo: int, hi: int, shared) -> None:
    sent, conn, err, stall, dump, stop, first, paced, relayed, failed, written, ended, flushed = shared
    tasks = load.tasks(lo, hi)

    def publish():
        sent[index], conn[index], err[index], paced[index] = load.sent, load.connected, len(load.errors), load.paced
        relayed[index], failed[index] = load.relayed, load.failed
        if load.dump_at is not None and not dump.value:
            dump.value = load.dump_at
        if load.errors and err[index] == 1:
            first.put(load.errors[0])

    said_at = time.monotonic()
    while not stop.is_set():
        if stall.value and load.stall_since is None:
            load.stall_since = stall.value
        publish()
        if load.args.nodes_per_relay and load.relayed < hi - lo and time.monotonic() - said_at > 15:
            said_at = time.monotonic()
            phases = collections.Counter(load.phase.get(n, "not started") for n in range(lo, hi))
            serving = sum(r.pid is not None for r in load.relays.values())
            print(f"  driver {index}: {hi - lo} agents, {load.relayed} through a relay; "
                  + ", ".join(f"{k} {v}" for k, v in sorted(phases.items()))
                  + f"; {serving} relay(s) served here", file=sys.stderr, flush=True)
        await asyncio.sleep(0.05)
    load.stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    # A group's relay may serve agents of the next driver too: stopped while
    # they still wrote, it would lose their last reports, which the run counts.
    try:
        await asyncio.to_thread(written.wait, 60)
    except threading.BrokenBarrierError:
        print(f"  driver {index}: another driver's agents did not end their streams in 60 s", file=sys.stderr)
    # A relay stopped gets DRAIN_S to send up what it holds, then is cut: at
    # 25,000 agents the collector was 17 s behind when the window ended, and
    # relays stopped then dropped 5,024 reports their agents had sent (each
    # says how many). A job's relays run as long as their agents; so here
    # they stop only once the collector has counted every report sent.
    publish()
    with ended.get_lock():
        ended.value += 1
    await asyncio.to_thread(flushed.wait, 90)
    await load.close()
    publish()
    if load.failures:
        print(f"  driver {index}: streams that failed: "
              + ", ".join(f"{k} {v}" for k, v in sorted(load.failures.items())), file=sys.stderr, flush=True)


async def drive_many(load: Drivers, proc: subprocess.Popen, seen: dict, args) -> dict:
    for p in load.procs:
        p.start()
    t0, t1, reports, cpu, rss, connect_s, relayed, healthy = await _window(load, proc, seen, args)
    deadline = time.monotonic() + 90
    while load.ended < len(load.procs) and time.monotonic() < deadline and any(p.is_alive() for p in load.procs):
        await asyncio.sleep(0.2)
    await counted(seen, load.sent)   # before the relays stop: see _drive_slice
    load.flushed.set()
    for p in load.procs:
        await asyncio.to_thread(p.join, 90)
    await counted(seen, load.sent)
    return dict(wall=t1 - t0, reports=reports, cpu=cpu[0], judge_cpu=cpu[1], relay_cpu=cpu[2], relays=cpu[3],
                relay_rss=cpu[4], t0=t0, t1=t1, rss=rss, connect_s=connect_s, connected=load.connected, relayed=relayed,
                failed=load.failed, healthy=healthy)


async def counted(seen: dict, sent: int, limit_s: float = 20.0) -> None:
    """Before the collector is stopped: wait until its own count (the stats
    line, every second) has every report the agents sent, or ``limit_s``. A
    collector still behind when the run ends has the last reports in its
    sockets; stopped then, it never reads them, and the run would count them
    lost (one run of ten on the device host)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and not (seen["stats"] and seen["stats"][-1][1] >= sent):
        await asyncio.sleep(0.2)


def ingested_rate(stats, t0: float, t1: float) -> float | None:
    """Reports/s the collector itself counted over its stats lines read inside [t0, t1]
    (its own clock measures the intervals, so pipe delays do not matter)."""
    inside = [(n, dt) for t, n, dt, _ in stats if t0 <= t <= t1]
    if len(inside) < 2:
        return None
    return (inside[-1][0] - inside[0][0]) / sum(dt for _, dt in inside[1:])


def main(argv=None) -> int:
    global FINGERPRINTS, PERF
    args = parse_args(sys.argv[1:] if argv is None else argv)
    fds = plan_fds(args)
    if args.no_perf:
        PERF = None
    FINGERPRINTS = args.fingerprints
    token = secrets.token_urlsafe(16)
    m, seen, load = run_load(token, args)
    status = print_figures(args, m, seen, load, fds)
    if args.collector_log:
        with open(args.collector_log, "w") as f:
            f.writelines(f"{t - m['t0']:+9.2f} {line}\n" for t, line in seen["timed"]
                         if "agent connected" not in line and "agent disconnected" not in line)
    if args.transport_floor:
        floor, _, floor_load = run_load(token, args, floor=True)
        per = [1e6 * r["cpu"] / max(1, r["reports"]) for r in (m, floor)]
        print(f"transport floor: bench/grpc_floor_server.py (reads each report, does nothing), the same load: "
              f"{floor['reports'] / floor['wall']:.0f} reports/s, {floor['cpu'] / floor['wall']:.2f} cores, "
              f"{per[1]:.0f} us CPU per report; the collector {per[0]:.0f} us, "
              f"{per[1] / per[0]:.0%} of it the floor")
    return status


def run_load(token: str, args, floor: bool = False) -> tuple[dict, dict, object]:
    """One run of the load against the collector (or the floor server)."""
    with tempfile.TemporaryDirectory(prefix="collector-bench-") as workdir:
        proc, address, seen = start_collector(workdir, token, args, floor)
        try:
            if args.simulated_relays and not floor:
                load = RelayLoad(address, token, args)
                m = asyncio.run(drive(load, proc, seen, args))
            elif args.drivers > 1:
                load = Drivers(address, token, args)
                m = asyncio.run(drive_many(load, proc, seen, args))
            else:
                load = Load(address, token, args)
                m = asyncio.run(drive(load, proc, seen, args))
        finally:
            proc.terminate()
            proc.wait(60)
        time.sleep(0.2)
    return m, seen, load


def print_figures(args, m: dict, seen: dict, load, fds: str) -> int:
    """The figures; returns the exit status (0: kept up, nothing lost, HANG on time)."""
    ingested = next((int(line.split("(")[1].split()[0]) for line in seen["lines"] if "node reports ingested" in line), -1)
    rate = m["reports"] / m["wall"]
    cores = os.cpu_count() or 1
    cpu_share = m["cpu"] / m["wall"]
    due = load.stall_since + args.hang_timeout if load.stall_since else None
    print(f"collector ingest: {args.agents} agents x {RANKS_PER_AGENT} ranks at {1 / args.interval:g} Hz, "
          f"{m['wall']:.1f} s window, {cores} cores" + (f"; collector from {args.collector_tree}"
                                                        if args.collector_tree else ""))
    print(f"  {fds}")
    print(f"  connected           {m['connected']} of {args.agents} agents' streams served within "
          f"{m['connect_s']:.1f} s of the first" + (f", {m['relayed']} through their relay" if args.nodes_per_relay
                                                     else "")
          + (f"; {m['failed']} stream(s) ended under their agent, which connected again" if m["failed"] else ""))
    got = ingested_rate(seen["stats"], m["t0"], m["t1"]) or 0.0
    print(f"  sent by the agents  {rate:8.0f} node-reports/s")
    print(f"  ingested, sustained {got:8.0f} node-reports/s  ({got * RANKS_PER_AGENT:.0f} ranks/s; "
          f"target {TARGET_REPORTS_PER_S:.0f}: ratio {got / TARGET_REPORTS_PER_S:.2f})")
    coalesced = seen.get("coalesced", 0)
    print(f"  ingested/sent       {ingested} / {load.sent} over the whole run"
          f" ({'all' if ingested == load.sent else 'MISMATCH'})"
          + (f"; the judge read {ingested - coalesced}, the relays sending each node's newest plain report of a "
             f"batch for the {coalesced} others" if coalesced else ""))
    print(f"  collector CPU       {m['cpu']:.1f} s in {m['wall']:.1f} s = {cpu_share:.2f} cores "
          f"({100 * cpu_share / cores:.0f}% of this {cores}-core machine); "
          f"{1e6 * m['cpu'] / max(1, m['reports']):.0f} us CPU per report")
    wall, sent, cpu, per_second = m["healthy"]
    if wall > 0:
        print(f"  before the stall    {cpu:.1f} s in {wall:.1f} s = {cpu / wall:.2f} cores, "
              f"{1e6 * cpu / max(1, sent):.0f} us CPU per report (the steady cost: no hang rule's pass over every rank)")
    if per_second:
        ordered = sorted(per_second)
        print(f"  ... second by second {ordered[len(ordered) // 2]:.2f} cores median, "
              f"{ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]:.2f} at the 90th percentile, {ordered[-1]:.2f} at most "
              f"({len(ordered)} s)")
    if args.ingest_procs:
        judge = m["judge_cpu"]
        print(f"  of which the judge  {judge:.1f} s = {judge / m['wall']:.2f} cores, "
              f"{1e6 * judge / max(1, m['reports']):.0f} us per report; {args.ingest_procs} ingest process(es) "
              f"{(m['cpu'] - judge) / m['wall']:.2f} cores")
    if args.simulated_relays:
        print(f"  report relays       {math.ceil(args.agents / args.nodes_per_relay)} simulated (one link each, "
              f"{args.batch_s:g} s batches): their own CPU is on the agents' nodes (the run without "
              f"--simulated-relays measures it)")
    elif args.nodes_per_relay:
        print(f"  report relays       {m['relays']} (one per {args.nodes_per_relay} nodes), {m['relay_cpu']:.1f} s = "
              f"{m['relay_cpu'] / m['wall']:.2f} cores in all, {m['relay_cpu'] / m['wall'] / max(1, m['relays']):.3f} "
              f"of a core each on its node; with the collector {1e6 * (m['cpu'] + m['relay_cpu']) / max(1, m['reports']):.0f}"
              f" us per report; {m['relay_rss']:.0f} MiB resident in all")
    print(f"  collector memory    {m['rss']:.0f} MiB resident (VmRSS) at the end of the window")
    behind = [b for t, _, _, b in seen["stats"] if m["t0"] <= t <= m["t1"]]
    if behind:
        print(f"  behind (its own)    {max(behind):.2f} s at most, {sorted(behind)[len(behind) // 2]:.2f} s median "
              f"(report age at ingest, or event-loop delay)")
    overload = seen.get("overload", [])
    before = seen.get("window_overload", 0)
    print(f"  overload            {len(overload) - before} OVERLOAD line(s) in the window"
          f"{f' ({before} while the agents connected)' if before else ''}; "
          f"{load.paced} ReportPace command(s) obeyed"
          + "".join(f"\n    {line[:150]}" for _, line in overload))
    declared = next((float(m.group(1)) for l in seen["lines"] if l.startswith("HANG: ")
                     for m in [re.search(r" for ([0-9.]+) s", l)] if m), None)
    if declared is not None:
        print(f"  HANG line says      the op was {declared:.1f} s old: {declared - args.hang_timeout:+.1f} s past "
              f"the timeout by the collector's own clock")
    for line in [l for l in seen["lines"] if "watchdog tick took" in l][:6]:
        print(f"  collector: {line}")
    for what, at in (("HANG line", seen.get("hang_at")), ("DumpStacks at agent", load.dump_at)):
        late = "never" if at is None or due is None else f"{at - due:+.2f} s after the stall crossed the timeout"
        print(f"  detection latency   {what:20s} {late}")
    if isinstance(load, Load):
        print(f"  agent 0's longest write {load.probe_write_s:.2f} s")
    if isinstance(load, RelayLoad):
        print(f"  the driver's own lateness: a batch went out up to {load.late_s:.2f} s after its time")
    if load.errors:
        print(f"  {len(load.errors)} agent errors, first: {load.errors[0]}")
    for line in [l for l in seen["lines"] if "agent connected" not in l][-8:] if load.errors or args.verbose else []:
        print(f"  collector: {line}")
    hang_at = seen.get("hang_at")
    on_time = hang_at is not None and due is not None and hang_at - due <= 2.0
    relayed = not args.nodes_per_relay or m["relayed"] == args.agents
    ok = (m["connected"] == args.agents and relayed and got >= 0.95 * rate and ingested == load.sent
          and load.dump_at is not None and not load.errors and on_time)
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
