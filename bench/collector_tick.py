"""The collector watchdog's tick, in-process, at N agents x 8 ranks.

Side by side on one state of N agents' reports (as bench/collector_ingest.py
sends them, young ops in flight as a training job's ranks mostly have):

* a quiet tick (nothing near the timeout): what every tick costs now, the
  index's look (``Watchdog.tick``), against the full pass every tick took
  before the index (snapshot + ``decide.analyse`` + the idle rule);
* the tick that declares a hang, by part: the rules with the divergence
  analysis, hang.json's document, the write. ``--stall one`` stalls one node
  (the rest idle: every other rank is explained as "not in any collective"),
  ``--stall all`` every rank but one (a job-wide hang), ``--stall behind``
  one node while every other rank is a seq behind, never having entered its
  collective (what bench/collector_ingest.py sends: each of those ranks is
  explained, the heaviest line to build).

    .venv/bin/python bench/collector_tick.py --agents 12500
    .venv/bin/python bench/collector_tick.py --agents 25000 --relayed   # the judge's CPU a relayed report
    .venv/bin/python bench/collector_tick.py --agents 25000 --healthy   # the full pass's snapshot
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))   # collector_ingest's reports

from diag.collector import verdict  # noqa: E402
from diag.hang import idle  # noqa: E402
from diag.hang.api import Limits  # noqa: E402
from diag.hang.decide import analyse  # noqa: E402
from diag.collector.config import Config  # noqa: E402
from diag.collector.events import EventStore  # noqa: E402
from diag.collector.servicer import SessionRegistry  # noqa: E402
from diag.collector.state import JobState  # noqa: E402
from diag.collector.watchdog import Watchdog  # noqa: E402
from diag.pb import collector_pb2 as pb  # noqa: E402

TIMEOUT_S = 10.0


def report(node: int, world: int, stalled_s: float | None, started: int = 101) -> pb.NodeReport:
    ranks = []
    for local in range(8):
        rank = node * 8 + local
        r = pb.RankProgress(rank=rank, local_rank=local, world_size=world, pid=10000 + rank, alive=True,
                            last_op="all_reduce")
        r.comms.add(comm_id=0, last_started_seq=started, last_completed_seq=100, comm_size=world,
                    lane=pb.OP_KIND_COLLECTIVE, group_name="default")
        age = stalled_s if stalled_s is not None else 0.002
        if not (stalled_s is not None and rank == 3) and started > 100:   # rank 3: not in the collective
            r.oldest_in_flight.CopyFrom(pb.InFlightOp(name="all_reduce", kind=pb.OP_KIND_COLLECTIVE, comm_id=0,
                                                      seq=101, age_ns=int(age * 1e9)))
        ranks.append(r)
    return pb.NodeReport(job_id="bench", node_rank=node, hostname=f"sim{node}", agent_pid=20000 + node, ranks=ranks)


class _Marked(io.StringIO):
    """The watchdog's output, noting when the HANG line was said."""

    def __init__(self, marks: dict) -> None:
        super().__init__()
        self._marks = marks

    def write(self, text: str) -> int:
        if text.startswith("HANG:"):
            self._marks.setdefault("HANG", time.perf_counter())
            self._marks.setdefault("HANG cpu", time.thread_time())
        return super().write(text)


def _mark_calls(registry: SessionRegistry, marks: dict) -> None:
    """Note when each command went out and when the ingest hold ended."""
    broadcast, hold = registry.broadcast, registry.hold

    def marked_broadcast(command):
        marks.setdefault(command.WhichOneof("command") or "?", time.perf_counter())
        marks.setdefault(f"{command.WhichOneof('command')} cpu", time.thread_time())
        return broadcast(command)

    def marked_hold(on):
        if not on:
            marks["released"] = time.perf_counter()
            marks["released cpu"] = time.thread_time()
        return hold(on)

    registry.broadcast, registry.hold = marked_broadcast, marked_hold


def relayed_ingest_us(agents: int, digests: bool, seconds: int = 10) -> float:
    """CPU per report of the judge's side of report relays (ingest_link.py),
    in-process: each group of 32 nodes sends two messages a second, as
    bench/collector_ingest.py's reports (the perf window in one report of
    5), with a relay's digest each or not (a relay before digest.py, or an
    ingest process); a snapshot every 10 s, as the full pass at 200,000
    ranks takes one, is counted in."""
    from collector_ingest import make_report, stamped
    from diag.collector.digest import digest
    from diag.collector.ingest_link import IngestLinkServicer, _Link
    from diag.collector.servicer import AgentSession
    from diag.pb import ingest_pb2 as ipb

    world = agents * 8
    made = {(n, p): make_report(n, world, None, 0.0, perf=p) for n in range(agents) for p in (True, False)}
    raw = {k: r.SerializeToString() for k, r in made.items()}
    read = {k: digest(r) for k, r in made.items()} if digests else {}

    def second(s: int) -> list[bytes]:
        out = []
        for group in range(0, agents, 32):
            for half in (0, 1):
                up = ipb.RelayUp()
                for n in range(group + half, min(group + 32, agents), 2):
                    key, sent_ns = (n, (s + n) % 5 == 0), (1000 + s) * 10**9
                    relayed = up.reports.add(stream=n + 1, report=stamped(raw[key], sent_ns), held_us=250_000)
                    if digests:
                        relayed.digest.CopyFrom(read[key])
                        relayed.digest.sent_mono_ns = sent_ns
                out.append(up.SerializeToString())
        return out

    class Opener:   # the link's sessions, opened by each stream's first report
        relays = None

        def open_session(self, report, wake):
            return AgentSession(report.node_rank, report.hostname, report.agent_pid), None

    state = JobState()
    judge, link = IngestLinkServicer(Opener(), state, SessionRegistry(agents)), _Link.__new__(_Link)
    link.sessions, link.refused, link.aborts, link.wake = {}, set(), [], None
    rounds = [second(s) for s in range(seconds + 1)]
    began = None
    for s, messages in enumerate(rounds):
        if s == 1:   # the first second opened the sessions: time the steady state
            began = time.process_time()
        for data in messages:
            for relayed in ipb.RelayUp.FromString(data).reports:
                judge._ingest(link, relayed, 1000.5 + s - relayed.held_us * 1e-6)
        if s % 10 == 0 or s == seconds:
            state.snapshot(1000.6 + s)
    return 1e6 * (time.process_time() - began) / (agents * seconds)


def healthy_snapshots(agents: int, rounds: int = 5, every_s: int = 10) -> tuple[list[float], float]:
    """CPU of the full pass's snapshot of a healthy job through report
    relays, in-process: each node's plain report every second with the
    relay's digest (the perf window in one report of 5), a snapshot every
    ``every_s`` s, as the full pass at 200,000 ranks takes one; ``rounds``
    snapshots after the first. Returns their CPU times and that of reading
    every rank's window once afterwards (the slow pass's read, once in ten
    snapshots at that size)."""
    from collector_ingest import make_report
    from diag.collector.digest import digest
    from diag.collector.server import GC_THRESHOLDS
    from diag.collector.slowness import windows_of

    world = agents * 8
    made = {(n, p): make_report(n, world, None, 0.0, perf=p) for n in range(agents) for p in (True, False)}
    raw = {k: r.SerializeToString() for k, r in made.items()}
    read = {k: digest(r) for k, r in made.items()}
    gc.freeze()   # as the collector's process runs (server.serve)
    gc.set_threshold(*GC_THRESHOLDS)
    state, out, s = JobState(), [], 0
    for n in range(rounds + 1):
        for _ in range(every_s):
            for node in range(agents):
                key = (node, (s + node) % 5 == 0)
                state.ingest_digest(raw[key], read[key], 1000.0 + s)
            s += 1
        cpu = time.thread_time()
        snap = state.snapshot(1000.0 + s)
        if n:   # the first one made every entry
            out.append(time.thread_time() - cpu)
    cpu = time.thread_time()
    windows_of(snap)
    return out, time.thread_time() - cpu


class GilGaps:
    """A thread that wakes every millisecond: the gaps between its wakes are
    how long others kept the GIL (ingest's threads wait as long)."""

    def __init__(self) -> None:
        self.wakes: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.wakes.append(time.perf_counter())
            time.sleep(0.001)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def longest_after(self, since: float) -> float:
        """The longest gap that ended after ``since``."""
        w = self.wakes
        return max((b - max(a, since) for a, b in zip(w, w[1:]) if b > since), default=0.0)


def best(fn, n: int = 3) -> float:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=int, default=2000)
    p.add_argument("--stall", choices=("one", "all", "behind"), default="all")
    p.add_argument("--profile", metavar="N", type=int, default=0,
                   help="also print the declaring tick's N costliest functions (cProfile, by own time)")
    p.add_argument("--relayed", action="store_true",
                   help="only the judge's CPU a report through report relays, with and without their digests")
    p.add_argument("--healthy", action="store_true",
                   help="only the CPU of the full pass's snapshot of a healthy job through report relays")
    args = p.parse_args(argv)
    if args.healthy:
        snaps, windows = healthy_snapshots(args.agents)
        print(f"healthy job through relays, in-process, {args.agents} agents x 8 ranks: the full pass's snapshot "
              f"{min(snaps):.3f} s CPU at best, {sorted(snaps)[len(snaps) // 2]:.3f} s median of {len(snaps)}; "
              f"every rank's window read afterwards {windows:.3f} s")
        return 0
    if args.relayed:
        with_digest, without = relayed_ingest_us(args.agents, True), relayed_ingest_us(args.agents, False)
        print(f"relayed ingest, in-process, {args.agents} agents x 8 ranks (CPU a report, parse and the "
              f"snapshots included): {with_digest:.1f} us with the relays' digests, {without:.1f} us without")
        return 0
    world, now = args.agents * 8, 1000.0
    with tempfile.TemporaryDirectory() as tmp:
        config = Config(job_id="bench", token="t", timeline_path=tmp, hang_timeout_s=TIMEOUT_S)
        state = JobState()
        registry = SessionRegistry(args.agents + 1)
        marks: dict[str, float] = {}
        watchdog = Watchdog(config, state, registry, EventStore(config), out=_Marked(marks))
        _mark_calls(registry, marks)
        started = 100 if args.stall == "behind" else 101
        reports = [report(node, world, None, started) for node in range(args.agents)]
        for r in reports:   # the first round fills the dicts; time the steady state
            state.ingest(r, now - 1)
        t = time.perf_counter()
        for r in reports:
            state.ingest(r, now)
        ingest_us = 1e6 * (time.perf_counter() - t) / args.agents
        watchdog.tick(now=now, now_unix=1.7e9)   # the first tick is a full pass
        quiet_now = [now + 0.5]

        def quiet_tick():
            quiet_now[0] += 0.5
            watchdog._full_at = quiet_now[0] + 60   # the index's look only, not the cadence's full pass
            watchdog.tick(now=quiet_now[0], now_unix=1.7e9)

        def full_pass():   # what every tick did before
            snap = state.snapshot(now + 1)
            findings = analyse(snap, Limits(TIMEOUT_S, config.silent_after_s))
            idle.find_idle(snap, config.idle_timeout_s, {a.node_rank for a in findings.silent_agents})

        quiet, full = best(quiet_tick, 5), best(full_pass)
        for node in range(args.agents) if args.stall == "all" else (0,):
            state.ingest(report(node, world, 12.0), now + 2)
        snap = state.snapshot(now + 2.1)
        t = time.perf_counter()
        findings = analyse(snap, Limits(TIMEOUT_S, config.silent_after_s))
        t_rules = time.perf_counter() - t
        t = time.perf_counter()
        doc = verdict.hang_document(findings, snap, job_id="bench", event_id="e", event_dir=tmp,
                                    declared_unix=1.7e9, timeout_s=TIMEOUT_S)
        t_doc = time.perf_counter() - t
        t = time.perf_counter()
        blob = json.dumps(doc, separators=(",", ":")).encode()
        t_json = time.perf_counter() - t
        watchdog.hang.expired_since.clear()   # the op just entered the window: the tick holds ingest, as live
        marks.clear()
        profile = cProfile.Profile() if args.profile else None
        t, cpu = time.perf_counter(), time.thread_time()
        if profile is not None:
            profile.enable()
        with GilGaps() as gaps:
            watchdog.tick(now=now + 2.1, now_unix=1.7e9)
        if profile is not None:
            profile.disable()
        t_tick, cpu_tick = time.perf_counter() - t, time.thread_time() - cpu
        assert watchdog.declared, "no HANG declared"
        at = {k: v - (cpu if k.endswith(" cpu") else t) for k, v in marks.items()}
    print(f"collector watchdog tick: {args.agents} agents x 8 ranks = {world} ranks, stall: {args.stall}")
    print(f"  ingest, in-process      {ingest_us:8.1f} us a report, steady state (parse not included)")
    print(f"  quiet tick, now         {1e3 * quiet:8.2f} ms   (index: ranks past the timeout, agents gone quiet)")
    print(f"  quiet tick, before      {1e3 * full:8.2f} ms   (snapshot + rules + idle over every rank)"
          f"  ratio {full / max(quiet, 1e-9):.0f}x")
    print(f"  declaring tick          {t_tick:8.2f} s    ({cpu_tick:.2f} s CPU) of which rules {t_rules:.2f} s, hang.json document "
          f"{t_doc:.2f} s, serialising it {t_json:.2f} s ({len(blob) / 1e6:.1f} MB)")
    print(f"  ... into that tick: DumpStacks sent at {at.get('dump_stacks', -1):.2f} s, HANG line at "
          f"{at.get('HANG', -1):.2f} s, ingest held until {at.get('released', -1):.2f} s, hang.json written "
          f"at the tick's end")
    print(f"  ... after ingest's hold: another thread waited for the GIL "
          f"{1e3 * gaps.longest_after(t + at.get('released', 0)):.0f} ms at most (hang.json built and written)")
    print(f"  ... by this thread's CPU time: DumpStacks at {at.get('dump_stacks cpu', -1):.2f} s, HANG line at "
          f"{at.get('HANG cpu', -1):.2f} s, ingest released at {at.get('released cpu', -1):.2f} s")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
