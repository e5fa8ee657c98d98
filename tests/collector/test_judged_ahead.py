"""The timeout's verdict judged ahead (hang_pass.py ``Ahead``), in-process
with a fake clock: declared at the first tick past the timeout with no
judgement of its own, the same verdict a judgement then makes; dropped when
a rank moves before the timeout (the line is judged afresh), and when a
long op that looked hung ends in time (no verdict at all)."""

from __future__ import annotations

import io

from diag.collector import hang_pass, verdict
from diag.collector.config import Config
from diag.collector.events import EventStore
from diag.collector.servicer import SessionRegistry
from diag.collector.state import JobState
from diag.collector.watchdog import Watchdog
from diag.hang.decide import decide
from diag.pb import collector_pb2 as pb
from tests.collector.fakes import ALL_REDUCE, node_report, rank_progress

T0 = 1000.0
TIMEOUT = 10.0
NODES = 64
WORLD = 8 * NODES
STUCK = 7        # its ranks are stuck in all_reduce seq 105 from second 5
STALL_AT = 5


def node(n: int, second: float, entered_at: float | None = None) -> pb.NodeReport:
    """Node ``n`` at ``second``: healthy (a young op) before the stall; from
    it, the stuck node's ranks in seq 105 and every other rank idle since
    at seq 104, never having entered it, or in it from ``entered_at``."""
    ranks = []
    for local in range(8):
        rank = n * 8 + local
        if second < STALL_AT:
            seq = 100 + int(second)
            ranks.append(rank_progress(rank, WORLD, op=ALL_REDUCE, age_s=0.003, seq=seq, started=seq,
                                       completed=seq - 1))
        elif n == STUCK or (entered_at is not None and second >= entered_at):
            since = STALL_AT if n == STUCK else entered_at
            ranks.append(rank_progress(rank, WORLD, op=ALL_REDUCE, age_s=second - since, seq=105, started=105,
                                       completed=104))
        else:
            ranks.append(rank_progress(rank, WORLD, seq=104, started=104, completed=104,
                                       idle_s=second - STALL_AT))
    return node_report(n, ranks)


def make(tmp_path, monkeypatch):
    config = Config(job_id="job1", token="t", timeline_path=str(tmp_path), hang_timeout_s=TIMEOUT,
                    silent_after_s=30.0, verdicts="timeout")
    state, out = JobState(), io.StringIO()
    watchdog = Watchdog(config, state, SessionRegistry(2000), EventStore(config), out=out)
    judged = []   # the monotonic time of every judgement's view

    def counted(view, limits):
        judged.append((view.now, limits.hang_timeout_s))
        return decide(view, limits)

    monkeypatch.setattr(hang_pass, "decide", counted)
    return watchdog, state, out, judged


def run(watchdog, state, until: float, movers=None, on_tick=None):
    """Reports every second, two ticks a second, up to ``until`` s in or
    the first HANG; ``movers``: node -> the second its ranks enter seq 105."""
    movers = movers or {}
    t = T0
    for second in range(1, int(until) + 1):
        for n in range(NODES):
            state.ingest(node(n, second, movers.get(n)), T0 + second)
        for half in (0.0, 0.5):
            t = T0 + second + half
            watchdog.tick(now=t, now_unix=1.7e9 + t)
            if on_tick is not None:
                on_tick(t)
            if watchdog.declared:
                return t
    return t


def test_judged_ahead_it_is_declared_at_the_first_tick_past_the_timeout_as_a_judgement_then_would(
        tmp_path, monkeypatch):
    watchdog, state, out, judged = make(tmp_path, monkeypatch)
    ahead_at = []
    t = run(watchdog, state, 20, on_tick=lambda t: ahead_at.append(t) if watchdog.hang.ahead else None)
    # the op started at T0 + 5 is past the 10 s timeout at the first tick after T0 + 15
    assert watchdog.declared and t == T0 + 15.5, t
    assert ahead_at and ahead_at[0] < T0 + 15, ahead_at
    # from the look ahead on, one judgement, for the moment past the crossing
    assert [(now, timeout) for now, timeout in judged if now >= ahead_at[0]] == \
        [(T0 + 15 + hang_pass.AHEAD_PAST_S, TIMEOUT)], judged
    line = out.getvalue().splitlines()[0]
    assert line.startswith("HANG: ranks 56-63 in all_reduce"), line
    assert "seq 105) for 10.5 s; ranks 0-55,64-511 not in any collective" in line, line
    # the line a judgement of the state at the declaring tick makes
    snap, event = state.snapshot(t), watchdog.declared[0]
    fresh = decide(snap, watchdog.hang.limits(30.0, False))
    doc = verdict.declaration(fresh, snap, job_id="job1", event_id=event.event_id, event_dir=event.path,
                              declared_unix=1.7e9 + t, hang_timeout_s=TIMEOUT, dropped={})
    assert doc["verdict"] == line


def test_a_rank_that_moves_before_the_timeout_drops_the_verdict_judged_ahead(tmp_path, monkeypatch):
    """Node 3's ranks enter the stuck op at second 14, after the look ahead:
    the line judged afresh at the timeout no longer calls them idle."""
    watchdog, state, out, judged = make(tmp_path, monkeypatch)
    made, dropped = [], []

    def seen(t):
        if watchdog.hang.ahead is not None:
            made.append(t)
        elif made and not dropped:
            dropped.append(t)

    t = run(watchdog, state, 20, movers={3: 14}, on_tick=seen)
    assert made and made[0] < T0 + 14, made
    assert dropped and T0 + 14 <= dropped[0] < T0 + 15, (made, dropped)
    assert watchdog.declared and t == T0 + 15.5, t
    line = out.getvalue().splitlines()[0]
    assert line.startswith("HANG: ranks 56-63 in all_reduce"), line
    assert "ranks 0-23,32-55,64-511 not in any collective" in line, line
    assert any(now == T0 + 15.5 for now, _ in judged), judged   # judged at the declaring tick itself


def test_no_verdict_is_judged_ahead_while_an_agent_has_reported_nothing_since_the_job_last_moved(
        tmp_path, monkeypatch):
    """Node 9's agent sends nothing after second 5 (quiet, not yet silent):
    a report of its on the way could tell of an op after the job's latest
    progress, which no mark would show. The timeout's tick judges."""
    watchdog, state, out, judged = make(tmp_path, monkeypatch)
    t = T0
    for second in range(1, 21):
        for n in range(NODES):
            if n != 9 or second <= 5:
                state.ingest(node(n, second), T0 + second)
        for half in (0.0, 0.5):
            t = T0 + second + half
            watchdog.tick(now=t, now_unix=1.7e9 + t)
            assert watchdog.hang.ahead is None
            if watchdog.declared:
                break
        if watchdog.declared:
            break
    assert watchdog.declared and t == T0 + 15.5, t
    assert any(now == T0 + 15.5 for now, _ in judged), judged
    assert out.getvalue().startswith("HANG: ranks 56-63 in all_reduce"), out.getvalue()


def test_a_long_op_that_ends_before_the_timeout_is_no_hang_though_judged_ahead(tmp_path, monkeypatch):
    """Every rank in one op from second 5 (a checkpoint's barrier, say): the
    look ahead finds it hung at the timeout; it ends at second 14."""
    watchdog, state, out, _ = make(tmp_path, monkeypatch)
    made = []

    def report(n, second):
        ranks = []
        for local in range(8):
            rank = n * 8 + local
            if STALL_AT <= second < 14:
                ranks.append(rank_progress(rank, WORLD, op=ALL_REDUCE, age_s=second - STALL_AT, seq=105,
                                           started=105, completed=104))
            else:
                seq = 100 + second
                ranks.append(rank_progress(rank, WORLD, op=ALL_REDUCE, age_s=0.003, seq=seq, started=seq,
                                           completed=seq - 1))
        return node_report(n, ranks)

    for second in range(1, 25):
        for n in range(NODES):
            state.ingest(report(n, second), T0 + second)
        for half in (0.0, 0.5):
            t = T0 + second + half
            watchdog.tick(now=t, now_unix=1.7e9 + t)
            if watchdog.hang.ahead is not None:
                made.append(t)
    assert made and made[-1] < T0 + 14, made
    assert not watchdog.declared and "HANG" not in out.getvalue(), out.getvalue()


def test_the_state_mark_moves_with_what_ages_alone_do_not_make():
    state = JobState()
    for second in (6, 7):   # the stuck node and an idle one, reported again: ages grow, nothing else
        state.ingest(node(STUCK, second), T0 + second)
        state.ingest(node(2, second), T0 + second)
        if second == 6:
            mark = state.mark()
    assert state.mark() == mark
    state.ingest(node(2, 8, entered_at=8), T0 + 8)   # node 2 enters the op
    assert state.mark() != mark
    mark = state.mark()
    for second in (9, 10):   # rank 16 exited; the next report says it again
        exited = node(2, second, entered_at=8)
        exited.ranks[0].alive = False
        state.ingest(exited, T0 + second)
        if second == 9:
            assert state.mark() != mark
            mark = state.mark()
    assert state.mark() == mark


def test_the_state_mark_moves_with_a_relayed_plain_report_of_a_young_op_not_with_one_that_only_ages():
    """Through a relay (digest.py): node 2 idle since the stall, reported
    again, leaves the mark; the same node with a young op in flight (it
    started one after the stall, under FILE_AFTER_S ago) moves it."""
    from diag.collector.digest import digest
    state = JobState()
    state.ingest(node(STUCK, 6), T0 + 6)
    for second in (6, 7):
        report = node(2, second)
        assert state.ingest_digest(report.SerializeToString(), digest(report), T0 + second)
        if second == 6:
            mark = state.mark()
    assert state.mark() == mark
    young = node(2, 8)
    young.ranks[0].oldest_in_flight.CopyFrom(pb.InFlightOp(age_ns=200_000_000, **ALL_REDUCE))
    assert digest(young).in_flight
    assert state.ingest_digest(young.SerializeToString(), digest(young), T0 + 8)
    assert state.mark() != mark
