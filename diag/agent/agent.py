"""The node agent: a sampler thread, a connection thread, a command thread.

It runs inside the launcher process, so it is an ancestor of every worker
(ptrace works under Yama scope 1). Every loop catches, logs and goes on: the
agent must never die and never hold up the workers.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time

from diag.agent import activity, dumps, procs
from diag.agent.config import AgentConfig
from diag.agent.connection import Connection
from diag.agent.lastwords import Recovery
from diag.agent.gpu_health import GpuMonitor
from diag.agent.sampler import Sampler
from diag.agent.state import NodeState
from diag.pb import collector_pb2 as pb
from diag.timeline import wire
from diag.timeline.ring import TimelineRing
from diag.perf.window import PerfWindow


class _ExitTimes(NodeState):
    """NodeState that notes when each rank's worker was seen gone (wall
    clock): the order of the ranks' exits, before torchrun says how."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.exit_seen: dict[int, tuple[int, float]] = {}   # rank -> (pid, unix time)

    def mark_exited(self, pid: int) -> None:
        now = time.time()
        for state in list(self.ranks.values()):
            if state.pid == pid and state.alive:
                self.exit_seen[state.rank] = (pid, now)
        super().mark_exited(pid)


class Agent:
    def __init__(self, config: AgentConfig, clock=time.monotonic_ns):
        self.config = config
        self.timeline = TimelineRing(int(config.timeline_window_s * 1e9), config.timeline_max_spans)
        self.state = _ExitTimes(clock, perf=PerfWindow(config.perf_window_s, config.perf_step),
                                log=self.log, timeline=self.timeline)
        # rank -> (pid, pb.RankExit) from torchrun's result (note_exits): how each ended
        self.exits: dict[int, tuple[int, pb.RankExit]] = {}
        self.exporter = None          # the Prometheus endpoint, with --metrics-port
        self._published = 0.0
        self.lock = threading.Lock()          # guards state
        self.sampler = Sampler(config.shm_dir, self.state, config.root_pid, self.log)
        self._stop = threading.Event()
        self.gpus = GpuMonitor(config, self.log, self._stop, self.device_claims)   # docs/gpu.md
        self._commands: queue.Queue = queue.Queue()
        self._report_seq = 0
        self._activity_said = False   # a failed /proc read is said once
        self._quiet = activity.QuietClock()
        self._said: dict[str, float] = {}
        self._threads: list[threading.Thread] = []
        self.connection = Connection(config, self) if config.collector else None
        self.dumped_events: list[tuple[str, int]] = []   # a repeated request is ignored
        self.recovery = Recovery(self, config)   # persist, last words, restart timing (docs/recovery.md)
        # Called once the collector's address turns out to be another
        # process's; the launcher stops the node with it.
        self.on_untrusted = None

    # -- lifecycle --------------------------------------------------------
    def start(self) -> None:
        self.sample_once()   # so the first report already lists the ranks
        self.gpus.start()
        self._start_metrics()
        loops = [("sampler", self._sample_loop), ("commands", self._command_loop),
                 ("persist", self.recovery.run)]
        if self.connection is not None:
            loops.append(("connection", self.connection.run))
        for name, target in loops:
            thread = threading.Thread(target=target, name=f"xpu-diag-agent-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """Send a last report (best effort) and stop every thread."""
        self.sample_once()
        self._stop.set()
        self._commands.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.name.endswith("connection"):
                thread.join(min(2.0, timeout))   # the stream ends after the last report
        for thread in self._threads:
            # Stacks being taken (a failure's, asked as the workers ended)
            # upload before the channel closes; bounded by the same deadline.
            if thread.name.endswith("commands"):
                thread.join(max(0.0, deadline - time.monotonic()))
        if self.connection is not None:
            self.connection.close()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.gpus.join(max(0.0, deadline - time.monotonic()))
        self.sampler.close()
        if self.exporter is not None:
            self.exporter.stop()

    def _start_metrics(self) -> None:
        """Serve /metrics if asked; a port that cannot be had is one warning."""
        if self.config.metrics_port is None:
            return
        try:
            from diag.perf.metrics import Exporter
            exporter = Exporter(self.config.job_id, self.config.hostname)
            why = exporter.start(self.config.metrics_addr, self.config.metrics_port)
        except Exception as exc:   # e.g. prometheus_client missing: never hurt the job
            why = f"metrics endpoint not served: {exc!r}; training goes on"
        if why:
            self.log(why, every=0)
            return
        self.exporter = exporter
        self.publish_metrics()

    def publish_metrics(self) -> None:
        """Hand the exporter a fresh snapshot (scrapes read it without our lock)."""
        with self.lock:
            ranks = [(r, s.local_rank, self.state.perf_message(r))
                     for r, s in sorted(self.state.ranks.items())]
            names = {r: dict(s.comms.names) for r, s in self.state.ranks.items()}   # the group label (docs/metrics.md)
            open_ops = {r: self.state.in_flight_op(r) for r in self.state.ranks}
        claims = self.device_claims()
        health = {r: self.gpus.health_for(claims.get(r)) for r, _, _ in ranks}
        gpu = {r: h.identity.pci_bus_id if h is not None else "" for r, h in health.items()}
        cfg = self.config
        rows = [(cfg.job_id, cfg.hostname, r, local, health[r], self.gpus.xid_counts(health[r].identity.index))
                for r, local, _ in ranks if health[r] is not None]
        self.exporter.publish([(r, local, perf, gpu[r], names[r], open_ops[r]) for r, local, perf in ranks
                               if perf is not None],
                              rows)
        self._published = time.monotonic()

    @property
    def stopping(self) -> threading.Event:
        return self._stop

    def log(self, message: str, every: float = 60.0) -> None:
        """One line on stderr; the same message at most once per ``every`` s."""
        now = time.monotonic()
        if now - self._said.get(message, -every) < every:
            return
        self._said[message] = now
        sys.stderr.write(f"xpu-diag agent (node {self.config.node_rank}, "
                         f"{self.config.hostname}): {message}\n")

    def collector_untrusted(self, reason: str) -> None:
        """The server at the collector's address failed the handshake: say so
        in one line, report no more (the connection thread ends) and tell the
        launcher, which stops the node rather than wait for a rendezvous whose
        node 0 could not start its collector."""
        self.log(f"{reason}; this agent reports no more and stops the node", every=0)
        if self.on_untrusted is not None:
            try:
                self.on_untrusted(reason)
            except Exception as exc:   # never let the connection thread die of it
                self.log(f"stopping the node failed: {exc!r}", every=0)

    # -- sampling and reports ---------------------------------------------
    def sample_once(self) -> float:
        try:
            with self.lock:
                return self.sampler.sample()
        except Exception as exc:
            self.log(f"sampling failed: {exc!r}")
            return 0.0

    def _sample_loop(self) -> None:
        # A ring found more than a quarter full is drained again soon, so a
        # burst of fast ops is not dropped; an idle node costs one pass per interval.
        wait = self.config.sample_interval
        while not self._stop.wait(wait):
            busy = self.sample_once() > 0.25
            if self.exporter is not None and time.monotonic() - self._published >= 1.0:
                try:
                    self.publish_metrics()
                except Exception as exc:
                    self.log(f"publishing metrics failed: {exc!r}")
            wait = min(0.005, self.config.sample_interval) if busy else self.config.sample_interval

    def device_claims(self) -> dict:
        """rank -> the DEVICE record naming its GPU, from its hook or its
        tracer (RankState.device_claim, docs/gpu.md)."""
        with self.lock:
            claims = {r: s.device_claim() for r, s in self.state.ranks.items()}
        return {r: rec for r, rec in claims.items() if rec is not None}

    def gpu_health(self, rank: int):
        """The rank's diag.gpu.api.GpuHealth, or None when it named no GPU."""
        return self.gpus.health_for(self.device_claims().get(rank))

    def note_exits(self, exits: dict[int, tuple[int, pb.RankExit]]) -> None:
        """How this node's workers ended (rank -> (pid, RankExit)), from
        torchrun's result: sent with each exited rank from the next report on
        (the FAILED verdict, docs/collector.md)."""
        with self.lock:
            self.exits.update(exits)

    def build_report(self, with_perf: bool = True) -> pb.NodeReport:
        # The ages in the report and its sent_mono_ns are one instant: the
        # collector places an op's start at sent - age, and the GPU and
        # process-tree reads between them took over a second on a loaded
        # host, moved a hung op's start by as much and re-armed its HANG.
        now = self.state.clock()
        with self.lock:
            ranks = self.state.report(with_perf, now)
            self._add_exits(ranks)
            perf = self.state.perf
            launches = {m.rank: perf.launches_total(m.rank) for m in ranks} if perf is not None else {}
        self._add_gpus(ranks)
        self._add_activity(ranks, launches)
        self._report_seq += 1
        cfg = self.config
        # sent_mono_ns: the collector learns our clock's offset and so how long
        # the report waited on the way (its lag, and in-flight ages from now).
        return pb.NodeReport(job_id=cfg.job_id, node_rank=cfg.node_rank, hostname=cfg.hostname,
                             agent_pid=os.getpid(), report_seq=self._report_seq, ranks=ranks,
                             local_world_size=cfg.local_world_size, sent_mono_ns=now)

    def _add_exits(self, ranks) -> None:
        """An exited rank's report carries when it went, how (once torchrun
        said) and its last ops' fingerprints, which a live rank sends only
        while stuck: a crash is explained from them (diag/failure). Held
        under the agent's lock."""
        for msg in ranks:
            if msg.alive:
                continue
            state = self.state.ranks.get(msg.rank)
            seen = self.state.exit_seen.get(msg.rank)
            if seen is not None and seen[0] == msg.pid:
                msg.exited_unix = seen[1]
            known = self.exits.get(msg.rank)
            if known is not None and known[0] in (msg.pid, 0):
                msg.exit.CopyFrom(known[1])
            if state is not None and state.pid == msg.pid:
                del msg.comms[:]
                msg.comms.extend(state.comms.progress(with_fingerprints=True))

    def _add_activity(self, ranks, launches: dict) -> None:
        """Each live rank's process-tree counters (diag/agent/activity.py):
        the evidence that tells a busy rank from a blocked one."""
        now, seen = time.monotonic_ns(), set()
        for msg in ranks:
            if not msg.alive or msg.pid <= 0:
                continue
            try:
                found = activity.of_tree(msg.pid)
            except Exception as exc:   # never stop a report for it; said once
                if not self._activity_said:
                    self._activity_said = True
                    self.log(f"reading rank {msg.rank}'s activity from /proc failed ({exc!r}); "
                             "hangs are judged by their timeout alone")
                return
            if found is None:
                continue
            n = launches.get(msg.rank, 0)
            seen.add((msg.rank, msg.pid))
            quiet = self._quiet.observe(msg.rank, msg.pid, found, n, now)
            msg.activity.CopyFrom(pb.RankActivity(cpu_ns=found.cpu_ns, io_bytes=found.io_bytes, procs=found.procs,
                                                  launches_total=n, disk_wait=found.disk_wait, quiet_ns=quiet))
        self._quiet.forget_others(seen)

    def _add_gpus(self, ranks) -> None:
        """Each rank's GPU identity and health into its RankProgress / TimelineRank."""
        from diag.gpu import wire as gpu_wire
        claims = self.device_claims()
        for msg in ranks:
            health = self.gpus.health_for(claims.get(msg.rank))
            if health is None:
                continue
            if isinstance(msg, pb.RankProgress):
                msg.gpu.CopyFrom(gpu_wire.health_msg(health))
            else:
                msg.gpu.CopyFrom(gpu_wire.identity_msg(health.identity))

    # -- commands ---------------------------------------------------------
    def submit(self, command: pb.Command) -> None:
        """Called from the connection thread; the work happens on the command
        thread, one command after another, so a KillWorkers sent after a
        DumpStacks never kills a worker before its stacks were taken. A
        timeline request runs on a thread of its own: it must not wait for
        the stack dumps of the same HANG (seconds), and it takes no ptrace."""
        if command.WhichOneof("command") == "persist_last_words":   # not behind the dumps
            self.recovery.request_last_words(command.persist_last_words.event_id)
            return
        if command.WhichOneof("command") == "collect_timeline":
            threading.Thread(target=self._no_throw_timeline, args=(command.collect_timeline,),
                             name="xpu-diag-agent-timeline", daemon=True).start()
            return
        self._commands.put(command)

    def _no_throw_timeline(self, request: pb.CollectTimeline) -> None:
        try:
            self.collect_timeline(request)
        except Exception as exc:
            self.log(f"timeline request failed: {exc!r}", every=0)

    def collect_timeline(self, request: pb.CollectTimeline) -> pb.TimelineUpload:
        """Snapshot the ring (after one more pass over the records) and upload it."""
        self.sample_once()
        now = time.monotonic_ns()
        with self.lock:
            on = self.state.timeline is not None   # None: switched off after a failure
            snaps = self.timeline.snapshot(now, request.last_ns) if on else []
        cfg = self.config
        upload = wire.build_upload(snaps, offset_ns=wire.clock_offset_ns(), job_id=cfg.job_id,
                                   request_id=request.request_id, node_rank=cfg.node_rank,
                                   hostname=cfg.hostname, window_ns=self.timeline.window_ns)
        self._add_gpus(upload.ranks)
        if self.connection is not None:
            self.connection.upload_timeline(upload)
        return upload

    def _command_loop(self) -> None:
        while True:
            command = self._commands.get()
            if command is None:
                return
            try:
                self.handle(command)
            except Exception as exc:
                self.log(f"command failed: {exc!r}", every=0)

    def handle(self, command: pb.Command) -> None:
        which = command.WhichOneof("command")
        if which == "dump_stacks":
            self.dump_stacks(command.dump_stacks)
        elif which == "kill_workers":
            self.recovery.on_kill(command.kill_workers)
            self.kill_workers(command.kill_workers.reason)

    def worker_pids(self, ranks=()) -> dict[int, int]:
        """rank -> pid of live workers this launcher started (empty ranks: all)."""
        self.sample_once()
        with self.lock:
            wanted = set(ranks) or set(self.state.ranks)
            pids = {r: self.state.pid_of(r) for r in wanted if r in self.state.ranks}
        root = self.config.root_pid
        return {r: p for r, p in pids.items()
                if p and procs.is_alive(p) and procs.is_descendant(p, root)}

    def dump_stacks(self, request: pb.DumpStacks) -> None:
        """Dump every requested rank this node holds (all of them if none are
        named), in parallel; a rank whose process is gone gets an error file."""
        live = self.worker_pids(request.ranks)
        with self.lock:
            known = {r: (s.pid, s.world_size) for r, s in self.state.ranks.items()
                     if not request.ranks or r in request.ranks}
        todo = [r for r in sorted(known) if (request.event_id, r) not in self.dumped_events]
        self.dumped_events.extend((request.event_id, r) for r in todo)
        threads = [threading.Thread(target=self._dump_rank, daemon=True,
                                    args=(request.event_id, r, known[r][0], known[r][1],
                                          r in live)) for r in todo]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _dump_rank(self, event_id: str, rank: int, pid: int, world: int, live: bool) -> None:
        try:
            if live:
                files = dumps.dump(pid, self.config.dump_timeout, self.config.tool_env,
                                   self.config.dump_tools)
            else:
                files = [(dumps.FMT.FORMAT_ERROR_TEXT,
                          f"rank {rank} pid {pid}: the process is gone (exited before the "
                          f"dump)\n".encode())]
            for i, (fmt, content) in enumerate(files):
                msg = pb.StackDump(job_id=self.config.job_id, event_id=event_id,
                                   node_rank=self.config.node_rank, hostname=self.config.hostname,
                                   rank=rank, world_size=world, pid=pid, format=fmt,
                                   content=content, last=i == len(files) - 1)
                if self.connection is not None:
                    self.connection.upload(msg)
        except Exception as exc:
            self.log(f"dumping rank {rank} (pid {pid}) failed: {exc!r}", every=0)

    def kill_workers(self, reason: str) -> None:
        pids = self.worker_pids()
        self.log(f"killing workers {sorted(pids.values())} on the collector's request: {reason}",
                 every=0)
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError as exc:
                self.log(f"could not kill pid {pid}: {exc}", every=0)
