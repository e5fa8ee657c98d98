"""A relay's digest of a plain report (diag/collector/digest.py) and the state's
reports kept until a snapshot: the same snapshot as a report made into
entries at once, whatever the mix."""

import random
import threading

from diag.collector.digest import digest
from diag.collector.slowness import windows_of
from diag.collector.state import FILE_AFTER_NS, AgentClock, JobState, KeptReport, Snapshot
from diag.hang.stalled import in_flight_past
from diag.pb import collector_pb2 as pb

WORLD = 32


def _report(rng: random.Random, node: int, seq: int, ranks=None, plain=False) -> pb.NodeReport:
    ranks = range(node * 4, node * 4 + 4) if ranks is None else ranks
    report = pb.NodeReport(job_id="j", node_rank=node, hostname=f"h{node}-{seq % 2}", agent_pid=100 + node,
                           report_seq=seq, sent_mono_ns=10**9 * (50 + seq) + rng.randrange(10**6))
    perf = rng.random() < 0.3
    for rank in ranks:
        r = report.ranks.add(rank=rank, local_rank=rank % 4, world_size=WORLD, pid=1000 + rank + 7 * (seq // 9),
                             alive=plain or rng.random() > 0.05, idle_ns=rng.randrange(3 * 10**9),
                             dropped_records=0 if plain or rng.random() > 0.05 else rng.randrange(1, 9))
        r.comms.add(comm_id=0, last_started_seq=seq + 1, last_completed_seq=seq, comm_size=WORLD)
        if rng.random() < 0.5:
            old = not plain and rng.random() < 0.2
            r.oldest_in_flight.CopyFrom(pb.InFlightOp(name="all_reduce", kind=pb.OP_KIND_COLLECTIVE, seq=seq,
                                                      age_ns=FILE_AFTER_NS + 5 if old else rng.randrange(FILE_AFTER_NS)))
        if perf:
            r.perf.window_s = 60.0 + seq
    return report


def _view(state: JobState, now: float) -> tuple:
    snap = state.snapshot(now)
    ranks = {rank: (e.progress.SerializeToString(), e.received, e.node_rank,
                    None if e.perf is None else e.perf.SerializeToString(), e.perf_at)
             for rank, e in snap.ranks.items()}
    return (ranks, snap.agents, snap.world_size, state.active_at, state.expired(now), state.dropped(),
            state.exit_reports, state.reports, state.size, state.take_lag())


def _three_ways(reports) -> list[tuple]:
    """Each report made into entries at once (a snapshot after each), kept
    until the end, and through its digest where a relay would send one."""
    eager, kept, digested = JobState(), JobState(), JobState()
    clocks = [{}, {}, {}]
    for i, report in enumerate(reports):
        now = 100.0 + 0.1 * i
        data = report.SerializeToString()
        for k, state in enumerate((eager, kept, digested)):
            clock = clocks[k].setdefault(report.node_rank, AgentClock())
            read = digest(report) if state is digested else None
            if read is None or not state.ingest_digest(data, read, now, clock):
                state.ingest(pb.NodeReport.FromString(data), now, clock)
            if state is eager:
                state.snapshot(now)
    return [_view(state, 100.0 + 0.1 * len(reports)) for state in (eager, kept, digested)]


def test_kept_and_digested_reports_make_the_snapshot_entries_made_at_once_do():
    for seed in range(40):
        rng = random.Random(seed)
        reports = []
        for seq in range(60):
            node = rng.randrange(8)
            if rng.random() < 0.05:   # a rank moved to another node (a restarted job's new layout)
                ranks = [rng.randrange(WORLD) for _ in range(rng.randrange(1, 5))]
                reports.append(_report(rng, node, seq, sorted(set(ranks))))
            else:
                reports.append(_report(rng, node, seq, plain=rng.random() < 0.7))
        eager, kept, digested = _three_ways(reports)
        assert kept == eager, seed
        assert digested == eager, seed


def test_a_plain_report_is_digested_and_anything_to_file_is_not():
    rng = random.Random(1)
    plain = _report(rng, 2, 5, plain=True)
    read = digest(plain)
    assert read is not None
    assert (read.node_rank, read.hostname, read.agent_pid, read.sent_mono_ns, read.world_size, list(read.ranks)) == \
        (2, plain.hostname, 102, plain.sent_mono_ns, WORLD, [8, 9, 10, 11])
    idle = [r.idle_ns for r in plain.ranks if not r.HasField("oldest_in_flight")]
    assert read.in_flight == any(r.HasField("oldest_in_flight") for r in plain.ranks)
    assert read.min_idle_ns == (min(idle) if idle else 0)

    def changed(edit) -> pb.NodeReport:
        report = pb.NodeReport()
        report.CopyFrom(plain)
        edit(report)
        return report

    for edit in (lambda r: setattr(r.ranks[1], "alive", False),
                 lambda r: setattr(r.ranks[2], "dropped_records", 3),
                 lambda r: r.ranks[0].oldest_in_flight.CopyFrom(pb.InFlightOp(age_ns=FILE_AFTER_NS)),
                 lambda r: setattr(r.ranks[3], "world_size", WORLD + 1),
                 lambda r: setattr(r.ranks[3], "rank", WORLD),
                 lambda r: setattr(r, "node_rank", -1)):
        assert digest(changed(edit)) is None


def test_a_digest_out_of_range_is_refused_and_stores_nothing():
    state = JobState()
    read = digest(_report(random.Random(2), 1, 1, plain=True))
    read.world_size = 2   # ranks 4-7 of a world of 2
    assert not state.ingest_digest(b"", read, 1.0)
    assert state.reports == 0 and state.size == (0, 0)


def test_a_relayed_window_carried_over_is_parsed_when_read_and_reads_the_same():
    """The newest report of each node has no window, an earlier relayed one
    had: the snapshot keeps that one's bytes (KeptReport), and the SLOW
    pass's windows and top's (the perf view, on a gRPC thread) read the
    same windows as from the parsed reports, however many threads at once."""
    def plain(node: int, seq: int, perf: bool) -> pb.NodeReport:
        report = _report(random.Random(seq), node, seq, plain=True)
        for r in report.ranks:
            r.ClearField("perf")
            if perf:
                r.perf.window_s, r.perf.steps, r.perf.launches = 60.0, 10 * seq + r.rank, 7
        return report

    parsed, relayed = JobState(), JobState()
    for seq in range(4):   # a snapshot after the first: the nodes are known, nothing is made at ingest
        for node in range(4):
            report = plain(node, seq, perf=seq == 1)
            parsed.ingest(report, 100.0 + seq)
            assert relayed.ingest_digest(report.SerializeToString(), digest(report), 100.0 + seq)
        if seq == 0:
            parsed.snapshot(100.5), relayed.snapshot(100.5)
    want, snap = parsed.snapshot(103.5), relayed.snapshot(103.5)
    assert all(type(e.perf_from) is KeptReport for e in snap.ranks.values())
    assert windows_of(snap) == windows_of(want) and len(windows_of(want)) == 16
    read: list = []
    start = threading.Barrier(4)

    def reader() -> None:
        start.wait()
        read.append({rank: e.perf.SerializeToString() for rank, e in relayed.snapshot(103.5).ranks.items()})

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert read == [{rank: e.perf.SerializeToString() for rank, e in want.ranks.items()}] * 4
    assert [snap.ranks[r].perf_at for r in range(16)] == [101.0] * 16


def test_the_stalled_rule_finds_the_same_ops_through_maybe_past_as_over_every_rank():
    """The stalled rule reads first only the ranks ``maybe_past`` names: a
    node whose kept report bounds its ops' age below the wait (a relay's
    plain report, a parsed one with young ops) is passed over unparsed. At
    every age of the reports and every wait, it finds the ops a pass over
    every rank finds, whatever the mix (ranks moved, ranks dead, nodes
    silent, ops filed)."""
    for seed in range(30):
        rng = random.Random(seed)
        state = JobState()
        clocks: dict[int, AgentClock] = {}
        for seq in range(60):
            node = rng.randrange(8)
            if rng.random() < 0.05:
                report = _report(rng, node, seq, sorted({rng.randrange(WORLD) for _ in range(rng.randrange(1, 5))}))
            else:
                report = _report(rng, node, seq, plain=rng.random() < 0.7)
            now = 100.0 + 0.1 * seq
            clock = clocks.setdefault(node, AgentClock())
            read = digest(report)
            if read is None or not state.ingest_digest(report.SerializeToString(), read, now, clock):
                state.ingest(report, now, clock)
            if rng.random() < 0.1:
                state.snapshot(now)
        for later in (0.0, 0.4, 1.5, 4.0, 30.0):
            snap = state.snapshot(106.0 + later)
            every_rank = Snapshot(snap.now, snap.world_size, dict(snap.ranks.items()), snap.agents)
            silent = {n for n in range(8) if rng.random() < 0.2}
            for wait in (0.3, 1.0, 2.0, 5.0, 20.0):
                fast, full = in_flight_past(snap, wait, silent), in_flight_past(every_rank, wait, silent)
                assert fast.ops == full.ops, (seed, later, wait)
                if full.ops:   # what the rules that explain a hang read
                    assert (fast.flying, fast.dead) == (full.flying, full.dead), (seed, later, wait)
                assert set(snap.ranks.maybe_past(snap.now, wait)) >= {rank for _, rank, _ in full.ops}
