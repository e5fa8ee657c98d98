"""Issue 21, in-process with a fake clock: the watchdog's tick costs nothing
for healthy ranks (no full snapshot), yet declares a stalled rank on time;
report ages come from the agents' clocks (a late report is no false HANG);
the pacer says OVERLOAD once, paces the agents, and says when it is over."""

from __future__ import annotations

import io
import json
import time

import pytest

from diag.collector import pace
from diag.collector.config import Config
from diag.collector.events import EventStore
from diag.collector.servicer import AgentSession, SessionRegistry
from diag.collector.state import AgentClock, JobState
from diag.collector.watchdog import Watchdog
from diag.pb import collector_pb2 as pb
from tests.collector.fakes import ALL_REDUCE, node_report, rank_progress

T0 = 1000.0
TIMEOUT = 10.0
NODES = 250
WORLD = 8 * NODES


def healthy_node(node: int, seq: int, in_flight_s: float = 0.0) -> pb.NodeReport:
    """8 ranks of a healthy job; each rank has a young op in flight (as a
    training job's ranks mostly do) when ``in_flight_s`` is given."""
    ranks = []
    for local in range(8):
        op = ALL_REDUCE if in_flight_s else None
        ranks.append(rank_progress(node * 8 + local, WORLD, op=op, age_s=in_flight_s, seq=seq, started=seq,
                                   completed=seq - 1))
    return node_report(node, ranks)


def make(tmp_path, **overrides):
    config = Config(job_id="job1", token="t", timeline_path=str(tmp_path), hang_timeout_s=TIMEOUT,
                    silent_after_s=5.0, **overrides)
    state, registry, out = JobState(), SessionRegistry(2000), io.StringIO()
    return Watchdog(config, state, registry, EventStore(config), out=out), state, registry, out


def test_healthy_ticks_take_no_snapshot_and_a_stall_is_declared_on_time(tmp_path):
    # the index alone: the evidence rules' looks (one a second once an op has
    # waited 5 s) are counted in test_evidence_looks_are_spaced
    watchdog, state, _, out = make(tmp_path, verdicts="timeout")
    watchdog.tick(now=T0)   # the first tick is a full pass (cadence)
    base = watchdog.full_ticks
    t = T0
    healthy_full = None
    for second in range(1, 31):   # 250 agents reporting, young ops in flight
        for node in range(NODES):
            stall = node == 7 and second >= 5
            report = healthy_node(node, 100 + (5 if stall else second), in_flight_s=0.003)
            if stall:   # node 7's ranks are stuck in the op they started at second 5
                for r in report.ranks:
                    r.oldest_in_flight.age_ns = int((second - 5) * 1e9)
            state.ingest(report, T0 + second)
        for half in (0.0, 0.5):
            t = T0 + second + half
            watchdog.tick(now=t, now_unix=1.7e9 + t)
            if t == T0 + 13:
                healthy_full = watchdog.full_ticks - base
            if watchdog.declared:
                break
        if watchdog.declared:
            break
    # stalled at T0 + 5: HANG at the first tick past T0 + 15
    assert watchdog.declared and T0 + 15 <= t <= T0 + 15.5, t
    assert out.getvalue().startswith("HANG: ranks 56-63 in all_reduce"), out.getvalue()
    # 25 ticks up to T0 + 13 (before the stalled op nears the timeout): only
    # the cadence's full passes (one per 2 s), not one per tick
    assert healthy_full is not None and healthy_full <= 7, healthy_full


class _Took:
    """hang_pass's perf_counter where every judgement takes ``cost`` seconds:
    the spacing under test follows the measured cost, which on a loaded
    2-core VM is anything from 0.1 to 0.5 s for 2,000 ranks."""

    def __init__(self, cost: float):
        self.cost, self.calls = cost, 0

    def perf_counter(self) -> float:
        self.calls += 1
        return (self.calls // 2) * self.cost    # start and end of one judgement are cost apart


@pytest.mark.parametrize("cost", [0.05, 0.4])
def test_evidence_looks_are_spaced(tmp_path, monkeypatch, cost):
    """While an op is waited on past the evidence rules' shortest wait (a
    healthy checkpoint), they look once per PROBE_EVERY_S, or four times
    their own cost when that is longer, never at every tick."""
    from diag.collector import hang_pass
    monkeypatch.setattr(hang_pass, "time", _Took(cost))
    watchdog, state, _, _ = make(tmp_path)
    for node in range(NODES):
        report = healthy_node(node, 100, in_flight_s=0.003)
        for r in report.ranks:
            r.oldest_in_flight.age_ns = 6_000_000_000     # every rank waits 6 s: a checkpoint's barrier
        state.ingest(report, T0)
    looks = []
    for i in range(14):    # 6 s to 9.25 s of waiting: under the 10 s timeout
        t = T0 + i * 0.25
        at = watchdog.hang.probe_at
        watchdog.tick(now=t, now_unix=1.7e9 + t)
        if watchdog.hang.probe_at != at:
            looks.append(t)
    assert not watchdog.declared          # all wait in one op, nobody is behind: no proof
    assert watchdog.hang.probe_cost == pytest.approx(cost)
    spacing = max(hang_pass.PROBE_EVERY_S, 4 * cost)
    gaps = [b - a for a, b in zip(looks, looks[1:])]
    # a look at the first tick, then one per spacing (the last second near
    # the timeout may go to the look ahead instead)
    assert len(looks) >= 1 + int(2.5 // spacing), (looks, gaps)
    assert min(gaps) >= spacing, (looks, gaps)


def test_the_timeout_cutoff_is_kept_apart_from_the_evidence_rules_later_one():
    """The evidence rules ask for ops 5 s old, the timeout for ops 10 s old,
    on the same index: asking the later cutoff first must not make the
    earlier one return the younger ops (which would take a snapshot and hold
    ingest at every tick while a checkpoint is waited on)."""
    state = JobState()
    old, young = healthy_node(0, 100, in_flight_s=12.0), healthy_node(1, 100, in_flight_s=6.0)
    state.ingest(old, T0)
    state.ingest(young, T0)
    for _ in range(2):
        assert state.expired(T0 - 5 + 1.5) == set(range(16))       # the probe's: both nodes' ranks
        assert state.expired(T0 - 10 + 1.5) == set(range(8))       # the timeout's: node 0's alone


def test_a_late_report_does_not_make_an_op_look_older():
    """The op's age is judged from when the agent built the report: one that
    waited 3 s in a backlog is 3 s old on arrival, not 0."""
    state, clock = JobState(), AgentClock()
    agent_clock = 50.0   # the agent's monotonic clock is 950 s behind ours
    for i in range(5):   # prompt reports teach the offset
        state.ingest(_sent(healthy_node(0, 10 + i), agent_clock + i), T0 + i, clock)
    late = healthy_node(0, 20, in_flight_s=2.0)
    state.ingest(_sent(late, agent_clock + 5), T0 + 5 + 3.0, clock)   # built at T0+5, ingested 3 s later
    entry = state.snapshot(T0 + 8).ranks[0]
    # placed at T0+5 (the offset may creep up 1 ms a second: a slow clock is never over-aged)
    assert T0 + 5 <= entry.received < T0 + 5 + 0.01
    assert state.take_lag()[0] >= 2.99
    # the age at T0+8: 2 s at build time + 3 s since, never more than the truth
    age = entry.progress.oldest_in_flight.age_ns * 1e-9 + (T0 + 8 - entry.received)
    assert 4.99 < age <= 5.0


def test_a_drifting_agent_clock_never_makes_reports_look_older():
    """An agent clock that runs 50 ppm slow: the learned offset follows it up."""
    clock = AgentClock()
    for i in range(0, 36000, 10):   # ten hours, a report every 10 s, all prompt
        built = clock.sent_at(int((i * (1 - 50e-6) + 7.0) * 1e9), T0 + i)
        assert built <= T0 + i + 1e-9


def _sent(report: pb.NodeReport, agent_now: float) -> pb.NodeReport:
    report.sent_mono_ns = int(agent_now * 1e9)
    return report


def test_pacer_says_overload_once_paces_and_recovers(tmp_path):
    watchdog, state, registry, out = make(tmp_path)
    session = AgentSession(3, "n3", 1)
    registry.add(session)
    clock = AgentClock()
    t = T0

    def second(lag: float) -> None:
        nonlocal t
        t += 0.5
        state.ingest(_sent(healthy_node(3, 1), t - lag), t, clock)
        watchdog.tick(now=t, now_unix=1.7e9 + t)

    for _ in range(4):
        second(0.0)
    for _ in range(28):   # 14 s 2.5 s behind: OVERLOAD once, then a slower step
        second(2.5)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("OVERLOAD: the collector is 2.5 s behind"), lines
    paces = [c.report_pace for c in session.commands if c.WhichOneof("command") == "report_pace"]
    assert [p.interval_ms for p in paces] == [2000, 4000] and {p.perf_every for p in paces} == {pace.PERF_EVERY}
    assert watchdog.pacer.overloaded and watchdog.pacer.silent_after(5.0) == 3 * 4.0 + 2
    for _ in range(24):   # caught up for 12 s: the quicker step first, not the agents' own pace at once
        second(0.0)
    assert len(out.getvalue().splitlines()) == 1
    assert session.commands[-1].report_pace.interval_ms == 2000 and watchdog.pacer.overloaded
    for _ in range(4):    # behind again for a moment: the step stays, and the 10 s count starts again
        second(0.5)
    for _ in range(18):   # caught up for 9 s
        second(0.0)
    assert session.commands[-1].report_pace.interval_ms == 2000 and watchdog.pacer.overloaded
    for _ in range(4):    # and 2 s more
        second(0.0)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("OVERLOAD over: the collector caught up"), lines
    assert session.commands[-1].report_pace == pb.ReportPace()   # back to the agents' own pace
    paces = [c.report_pace.interval_ms for c in session.commands if c.WhichOneof("command") == "report_pace"]
    assert paces == [2000, 4000, 2000, 0]
    assert not watchdog.pacer.overloaded and registry.pace is None


def test_ingest_holds_only_while_a_hang_may_be_declared(tmp_path):
    """An op entering the timeout's window holds ingest for the ticks that may
    declare it; a silent agent's op that stays there (never hung: its data is
    stale) does not hold ingest at every tick after."""
    watchdog, state, registry, out = make(tmp_path)
    holds = []
    registry.hold = holds.append   # what the server's loop would be told
    report = healthy_node(0, 5, in_flight_s=2.0)
    state.ingest(report, T0)       # then node 0 goes silent (5 s): its op is judged by no one
    t = T0
    while t < T0 + 30:
        t += 0.5
        watchdog.tick(now=t, now_unix=1.7e9 + t)
    assert not watchdog.declared and "SILENT: " in out.getvalue()
    # held (True then False) only on the ticks within HOLD_FOR_S of the op entering the window, and
    # for the one look ahead at the timeout's verdict (hang_pass.judge_ahead: no hang, the agent is silent)
    assert 0 < holds.count(True) <= 2 * 4 + 1 and holds.count(True) == holds.count(False), holds


def test_the_hang_line_and_commands_come_before_hang_json_and_ingest_resumes_before_it_is_built(tmp_path):
    """The declaring tick says the line and sends DumpStacks and PersistLastWords
    before hang.json's per-rank rows are built, and lets ingest go before
    building them; the file is complete (every rank's row) at the tick's end,
    and the pacer does not count the held reports' drain as overload."""
    watchdog, state, registry, out = make(tmp_path)
    seen = []   # (what, whether hang.json existed, whether ingest was held) in order
    events_dir = tmp_path / "job1"

    def written():
        return any(p.name == "hang.json" for p in events_dir.rglob("hang.json")) if events_dir.exists() else False

    held = [False]

    def hold(on):
        held[0] = on
        seen.append(("hold" if on else "release", written(), on))

    def broadcast(command):
        seen.append((command.WhichOneof("command"), written(), held[0]))
        return 0

    registry.hold, registry.broadcast = hold, broadcast
    say = watchdog.say
    watchdog.say = lambda line: (seen.append((line.split(":")[0], written(), held[0])), say(line))
    for node in range(NODES):
        state.ingest(healthy_node(node, 100, in_flight_s=0.003), T0)
    watchdog.tick(now=T0, now_unix=1.7e9)
    for node in range(NODES):   # every rank stalls: 11 s in the same all_reduce
        state.ingest(healthy_node(node, 100, in_flight_s=11.0), T0 + 1)
    watchdog.tick(now=T0 + 1.5, now_unix=1.7e9 + 1.5)
    assert watchdog.declared and "HANG: " in out.getvalue()
    order = [what for what, _, _ in seen]
    assert order.index("dump_stacks") < order.index("HANG") < order.index("release"), seen
    assert order.index("persist_last_words") < order.index("HANG"), seen
    # the line and the commands: while ingest is held and before hang.json exists
    assert all(held_then and not file_then for what, file_then, held_then in seen
               if what in ("dump_stacks", "persist_last_words", "HANG")), seen
    doc = json.loads(next(events_dir.rglob("hang.json")).read_text())
    assert [row["rank"] for row in doc["ranks"]] == list(range(WORLD))
    assert all("gpu" in row and row["in_flight_s"] > TIMEOUT for row in doc["ranks"])
    assert doc["verdict"] == out.getvalue().splitlines()[-1]
    assert watchdog.pacer._forgive_until > time.monotonic()   # the drain of what was held is not overload


def test_a_window_is_carried_over_reports_without_one_for_the_same_process_only():
    """Agents told to pace send the perf window with one report in N: the
    reports between keep the last one, checked when read (not at ingest)."""
    state = JobState()

    def report(pid: int, perf: bool) -> pb.NodeReport:
        ranks = []
        for local in range(2):
            r = rank_progress(local, 2)
            r.pid = pid + local
            if perf:
                r.perf.window_s, r.perf.steps = 60.0, 10 + pid
            ranks.append(r)
        return node_report(0, ranks)

    state.ingest(report(100, perf=True), T0)
    state.ingest(report(100, perf=False), T0 + 1)
    snap = state.snapshot(T0 + 1)
    assert [snap.ranks[r].perf.steps for r in (0, 1)] == [110, 110] and snap.ranks[0].perf_at == T0
    assert snap.ranks[0].received == T0 + 1
    state.ingest(report(200, perf=False), T0 + 2)   # the workers restarted: another process, no window yet
    snap = state.snapshot(T0 + 2)
    assert [snap.ranks[r].perf for r in (0, 1)] == [None, None]
    state.ingest(report(200, perf=True), T0 + 3)
    assert state.snapshot(T0 + 3).ranks[1].perf.steps == 210
