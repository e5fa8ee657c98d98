"""Hang rules, detector and watchdog tick, driven by a fake clock (no gRPC)."""

import io
import json

import pytest

from diag.collector import verdict
from diag.hang import decide
from diag.hang.api import Limits
from diag.hang.detector import HangDetector
from diag.hang.not_in_collective import EXITED, NOT_IN_ANY
from diag.collector.config import Config
from diag.collector.events import EventStore
from diag.collector.servicer import AgentSession, SessionRegistry
from diag.collector.state import JobState, ReportError
from diag.collector.watchdog import Watchdog
from tests.collector.fakes import ALL_REDUCE, node_report, rank_progress

T0 = 1000.0
TIMEOUT = 10.0
SILENT = 5.0


def stalled_rank2_report(age_s, *, world=4, pid_base=1000):
    """Ranks 0,1,3 wait in all_reduce seq 41 on group 0; rank 2 never got there."""
    ranks = [rank_progress(r, world, pid=pid_base + r, op=ALL_REDUCE, age_s=age_s, seq=41, started=41, completed=40)
             for r in (0, 1, 3)]
    ranks.insert(2, rank_progress(2, world, pid=pid_base + 2, started=40, idle_s=age_s, last_op="all_reduce"))
    return node_report(0, ranks)


def analyse(state, now):
    return decide.analyse(state.snapshot(now), Limits(TIMEOUT, SILENT))


def test_not_hung_until_age_at_report_plus_time_since_receipt_exceeds_timeout():
    state = JobState()
    state.ingest(stalled_rank2_report(age_s=5.0), T0)
    assert not decide.analyse(state.snapshot(T0 + 4.9), Limits(TIMEOUT, 60.0)).is_hang  # 9.9 s in flight
    findings = decide.analyse(state.snapshot(T0 + 5.5), Limits(TIMEOUT, 60.0))  # 10.5 s in flight
    assert findings.is_hang
    assert [(g.op.name, g.op.comm_id, g.op.seq, g.ranks) for g in findings.hung] == [("all_reduce", 0, 41, (0, 1, 3))]
    assert findings.hung[0].max_age_s == pytest.approx(10.5)


def test_idle_rank_behind_in_seq_is_the_culprit_and_named_in_the_line():
    state = JobState()
    state.ingest(stalled_rank2_report(age_s=12.0), T0)
    findings = analyse(state, T0 + 0.1)
    assert findings.hung_ranks == [0, 1, 3]
    assert [(s.rank, s.reason) for s in findings.suspects] == [(2, NOT_IN_ANY)]
    assert [(n.rank, n.op.seq, n.last_started_seq) for n in findings.never_entered] == [(2, 41, 40)]
    assert findings.culprits == [2]
    line = verdict.hang_line(findings, "/tl/job1/20261122T120000Z")
    assert line == ("HANG: ranks 0-1,3 in all_reduce (group \"default\" (ranks 0-3), seq 41) for 12.1 s; "
                    "rank 2 not in any collective (at seq 40 on group \"default\"); stacks in /tl/job1/20261122T120000Z/")


def test_rank_stuck_in_an_earlier_collective_never_entered_the_later_one():
    state = JobState()
    ranks = [rank_progress(r, 4, op=ALL_REDUCE, age_s=20.0, seq=41, started=41, completed=40) for r in (0, 1, 3)]
    ranks.insert(2, rank_progress(2, 4, op=dict(name="broadcast", kind=3), age_s=30.0, seq=40, started=40,
                                  completed=39))
    state.ingest(node_report(0, ranks), T0)
    findings = analyse(state, T0)
    assert [g.ranks for g in findings.hung] == [(0, 1, 3), (2,)]
    assert [(n.rank, n.last_started_seq) for n in findings.never_entered] == [(2, 40)]
    assert findings.culprits == [2]
    assert "rank 2 never entered all_reduce (group \"default\", seq 41)" in verdict.hang_line(findings, "/x")


def test_group_membership_outside_the_default_group_comes_from_comm_progress():
    state = JobState()
    g = dict(comm_id=77)
    ranks = [rank_progress(0, 4, op=ALL_REDUCE, age_s=20.0, seq=4, started=4, **g),
             rank_progress(1, 4, op=dict(name="matmul_step", kind=5), age_s=1.0, seq=0, started=3, **g),
             rank_progress(2, 4, op=dict(name="matmul_step", kind=5), age_s=1.0),   # not a member of 77
             rank_progress(3, 4, op=ALL_REDUCE, age_s=20.0, seq=4, started=4, **g)]
    state.ingest(node_report(0, ranks), T0)
    findings = analyse(state, T0)
    assert [(n.rank, n.op.comm_id, n.last_started_seq) for n in findings.never_entered] == [(1, 77, 3)]
    assert findings.culprits == [1]


def test_silent_agent_ranks_are_reported_not_judged_hung():
    state = JobState()
    node1 = [rank_progress(r, 8, op=ALL_REDUCE, age_s=1.0, seq=41, started=41) for r in range(4, 8)]
    node0 = [rank_progress(r, 8, op=ALL_REDUCE, age_s=8.0, seq=41, started=41) for r in range(4)]
    state.ingest(node_report(1, node1), T0)
    state.ingest(node_report(0, node0), T0 + 6.0)  # node 0 keeps reporting; node 1 went quiet at T0
    findings = analyse(state, T0 + 10.0)
    assert [(a.node_rank, a.ranks) for a in findings.silent_agents] == [(1, (4, 5, 6, 7))]
    assert findings.hung_ranks == [0, 1, 2, 3]  # node 1 would extrapolate to 11 s, but its data is stale
    assert findings.culprits == [4, 5, 6, 7]
    assert "ranks 4-7 silent (agent stopped reporting)" in verdict.hang_line(findings, "/x")


def test_line_stays_short_for_many_distinct_reasons_and_names_host_functions():
    state = JobState()
    ranks = [rank_progress(0, 12, op=ALL_REDUCE, age_s=11.0, seq=20, started=20)]
    ranks += [rank_progress(r, 12, started=r) for r in range(1, 12)]  # 11 different seqs behind
    state.ingest(node_report(0, ranks), T0)
    findings = analyse(state, T0)
    line = verdict.hang_line(findings, "/x")
    assert line.count(";") == 6 and "; ranks 5-11 not waiting either (see hang.json); stacks in /x/" in line
    assert findings.culprits == list(range(1, 12))
    state.ingest(node_report(0, [rank_progress(0, 12, op=dict(name="load_batch", kind=5), age_s=11.0)]), T0)
    assert verdict.hang_line(analyse(state, T0), "/x").startswith("HANG: rank 0 in host function load_batch for 11.0 s")


def test_silent_agent_alone_is_not_a_hang():
    state = JobState()
    state.ingest(node_report(1, [rank_progress(r, 8) for r in range(4, 8)]), T0)
    findings = analyse(state, T0 + SILENT + 0.1)
    assert not findings.is_hang and findings.silent_ranks == [4, 5, 6, 7]
    assert verdict.silent_line(findings.silent_agents[0]).startswith("SILENT: ranks 4-7 on node 1 (n1)")


def test_ranks_that_never_reported_are_listed_when_the_job_hangs():
    state = JobState()
    state.ingest(node_report(0, [rank_progress(r, 8, op=ALL_REDUCE, age_s=11.0, seq=3, started=3)
                                 for r in range(4)]), T0)
    findings = analyse(state, T0)
    assert findings.missing_ranks == (4, 5, 6, 7)
    assert findings.culprits == [4, 5, 6, 7]
    assert "ranks 4-7 never reported" in verdict.hang_line(findings, "/x")


def test_every_rank_waiting_in_the_same_op_names_no_culprit():
    state = JobState()
    state.ingest(node_report(0, [rank_progress(r, 2, op=ALL_REDUCE, age_s=11.0, seq=3, started=3)
                                 for r in range(2)]), T0)
    findings = analyse(state, T0)
    assert findings.culprits == []
    assert "no rank is behind" in verdict.hang_line(findings, "/x")


def test_detector_fires_once_then_rearms_when_the_hung_ops_complete():
    state, detector = JobState(), HangDetector()

    def step(now):
        snap = state.snapshot(now)
        return detector.update(decide.analyse(snap, Limits(TIMEOUT, SILENT)), snap)[:2]

    state.ingest(stalled_rank2_report(age_s=11.0), T0)
    assert step(T0) == (True, False)
    assert step(T0 + 0.5) == (False, False)
    state.ingest(stalled_rank2_report(age_s=30.0), T0 + 19)  # same ops, still stuck
    assert step(T0 + 19.5) == (False, False)
    done = [rank_progress(r, 4, started=41, completed=41) for r in range(4)]
    state.ingest(node_report(0, done), T0 + 20)
    assert step(T0 + 20.5) == (False, True)
    assert detector.armed
    state.ingest(stalled_rank2_report(age_s=11.0), T0 + 40)  # a second hang is a new event
    assert step(T0 + 40.5) == (True, False)


def test_detector_rearms_when_workers_restart_with_new_pids():
    state, detector = JobState(), HangDetector()
    state.ingest(stalled_rank2_report(age_s=11.0), T0)
    snap = state.snapshot(T0)
    assert detector.update(decide.analyse(snap, Limits(TIMEOUT, SILENT)), snap)[0]
    state.ingest(stalled_rank2_report(age_s=0.5, pid_base=5000), T0 + 5)  # torchrun restarted them
    snap = state.snapshot(T0 + 5)
    assert detector.update(decide.analyse(snap, Limits(TIMEOUT, SILENT)), snap)[:2] == (False, True)


def test_detector_does_not_rearm_on_silence_and_announces_silence_once():
    state, detector = JobState(), HangDetector()
    state.ingest(stalled_rank2_report(age_s=11.0), T0)
    snap = state.snapshot(T0)
    assert detector.update(decide.analyse(snap, Limits(TIMEOUT, SILENT)), snap)[0]
    for now, expect_new in ((T0 + 6, [0]), (T0 + 7, []), (T0 + 8, [])):
        snap = state.snapshot(now)
        fire, rearmed, newly = detector.update(decide.analyse(snap, Limits(TIMEOUT, SILENT)), snap)
        assert (fire, rearmed, [a.node_rank for a in newly]) == (False, False, expect_new)
    state.ingest(stalled_rank2_report(age_s=20.0), T0 + 9)  # back, still stuck: no new event
    snap = state.snapshot(T0 + 9)
    assert detector.update(decide.analyse(snap, Limits(TIMEOUT, SILENT)), snap) == (False, False, [])
    snap = state.snapshot(T0 + 15)  # silent again: announced again
    assert [a.node_rank for a in detector.update(decide.analyse(snap, Limits(TIMEOUT, SILENT)), snap)[2]] == [0]


def test_ingest_refuses_out_of_range_ranks_and_mixed_world_sizes():
    state = JobState()
    with pytest.raises(ReportError, match="rank 4 with world_size 4"):
        state.ingest(node_report(0, [rank_progress(4, 4)]), T0)
    with pytest.raises(ReportError, match="world_size 8"):
        state.ingest(node_report(0, [rank_progress(0, 4), rank_progress(1, 8)]), T0)
    with pytest.raises(ReportError, match="rank -1"):
        state.ingest(node_report(0, [rank_progress(-1, 4)]), T0)
    assert state.snapshot(T0).ranks == {} and state.reports == 0


def test_disconnected_agent_keeps_its_ranks_until_they_turn_silent():
    state = JobState()
    state.ingest(node_report(1, [rank_progress(1, 2)], agent_pid=8), T0)
    state.agent_left(1, agent_pid=7)  # an older agent of node 1: ignored
    assert state.snapshot(T0).agents[1].connected
    state.agent_left(1, agent_pid=8)
    snap = state.snapshot(T0 + SILENT + 1)
    assert list(snap.ranks) == [1] and not snap.agents[1].connected
    assert [a.node_rank for a in decide.analyse(snap, Limits(TIMEOUT, SILENT)).silent_agents] == [1]


def test_agent_whose_ranks_all_exited_may_go_quiet():
    state = JobState()
    exited = [rank_progress(r, 2, op=ALL_REDUCE, age_s=50.0) for r in range(2)]
    for p in exited:
        p.alive = False
    state.ingest(node_report(0, exited), T0)
    findings = analyse(state, T0 + 60)
    assert not findings.is_hang and not findings.silent_agents


def test_exited_rank_while_others_wait_is_a_culprit():
    state = JobState()
    report = stalled_rank2_report(age_s=11.0)
    report.ranks[2].alive = False
    state.ingest(report, T0)
    findings = analyse(state, T0)
    assert [(s.rank, s.reason) for s in findings.suspects] == [(2, EXITED)]
    assert findings.culprits == [2] and findings.never_entered == ()
    assert "; rank 2 exited; " in verdict.hang_line(findings, "/x")


def make_watchdog(tmp_path, **overrides):
    config = Config(job_id="job/1", token="t", timeline_path=str(tmp_path), hang_timeout_s=TIMEOUT,
                    silent_after_s=SILENT, **overrides)
    state, registry, out = JobState(), SessionRegistry(8), io.StringIO()
    return Watchdog(config, state, registry, EventStore(config), out=out), state, registry, out


def test_watchdog_tick_declares_once_writes_hang_json_and_queues_dump_request(tmp_path):
    watchdog, state, registry, out = make_watchdog(tmp_path)
    session = AgentSession(0, "n0", 9000)
    registry.add(session)
    state.ingest(stalled_rank2_report(age_s=11.0), T0)
    declared_unix = 1795000000.0
    watchdog.tick(now=T0, now_unix=declared_unix)
    watchdog.tick(now=T0 + 0.5, now_unix=declared_unix + 0.5)
    event_dir = tmp_path / "job1" / "20261118T110640Z"
    lines = out.getvalue().splitlines()
    assert lines == [f"HANG: ranks 0-1,3 in all_reduce (group \"default\" (ranks 0-3), seq 41) for 11.0 s; rank 2 not in any collective "
                     f"(at seq 40 on group \"default\"); rule timeout: in flight past --hang-timeout 10 s; "
                     f"stacks in {event_dir}/"]
    doc = json.loads((event_dir / "hang.json").read_text())
    assert doc["hung_ranks"] == [0, 1, 3] and doc["culprits"] == [2] and doc["world_size"] == 4
    assert doc["dumps"] == {} and doc["dumps_missing"] == [0, 1, 2, 3]
    row2 = doc["ranks"][2]
    assert (row2["rank"], row2["op"], row2["last_started_seq"], row2["pid"]) == (2, None, 40, 1002)
    # the group by the name the HANG line gives it, beside its id (issue 34 item 1)
    assert [(r["comm_id"], r["group"]) for r in doc["ranks"]] == [(0, "default"), (0, "default"), (None, None),
                                                                   (0, "default")]
    assert [(n["rank"], n["comm_id"], n["group"]) for n in doc["never_entered"]] == [(2, 0, "default")]
    assert [c.WhichOneof("command") for c in session.commands] == ["dump_stacks", "persist_last_words"]
    assert [c.dump_stacks.event_id for c in session.commands][:1] == ["20261118T110640Z"]


def test_watchdog_survives_a_failing_tick(tmp_path, caplog):
    watchdog, state, _, _ = make_watchdog(tmp_path, eval_interval_s=0.01)
    calls = []

    def boom(*a, **k):
        calls.append(1)
        raise RuntimeError("disk on fire")

    watchdog.tick = boom
    watchdog.start()
    try:
        import time
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        watchdog.stop()
    assert len(calls) >= 3
    assert "disk on fire" in caplog.text


def test_watchdog_logs_the_ingest_rate_every_stats_interval(tmp_path, caplog):
    watchdog, state, _, _ = make_watchdog(tmp_path, stats_interval_s=10.0)
    caplog.set_level("INFO", logger="diag.collector")
    watchdog.tick(now=T0)
    for i in range(40):
        state.ingest(node_report(i % 2, [rank_progress(i % 2, 2)]), T0 + i * 0.25)
    watchdog.tick(now=T0 + 5)
    assert "ingest:" not in caplog.text
    watchdog.tick(now=T0 + 10)
    assert "ingest: 40 reports total, 4.0/s over the last 10.000 s; 2 agents, 2 ranks; 0.00 s behind" in caplog.text


def test_dropped_records_are_reported_when_they_start_and_when_they_double(tmp_path):
    watchdog, state, _, out = make_watchdog(tmp_path)

    def report(drops):
        ranks = [rank_progress(r, 4) for r in range(4)]
        for rank, n in drops.items():
            ranks[rank].dropped_records = n
        state.ingest(node_report(0, ranks), T0)

    watchdog.tick(now=T0)
    report({1: 5, 2: 5})
    watchdog.tick(now=T0 + 0.5)
    report({1: 8, 2: 5})            # 13 < 2 x 10: no new line
    watchdog.tick(now=T0 + 1.0)
    report({1: 15, 2: 5, 3: 1})     # 21 >= 20
    watchdog.tick(now=T0 + 1.5)
    assert out.getvalue().splitlines() == [
        "DROPPED: ranks 1-2 dropped 10 progress records (ring full; the op counts under-report); "
        "raise XPU_TIMER_RING_CAPACITY",
        "DROPPED: ranks 1-3 dropped 21 progress records (ring full; the op counts under-report); "
        "raise XPU_TIMER_RING_CAPACITY"]


def test_the_hang_line_and_hang_json_say_whose_records_were_dropped(tmp_path):
    """Issue 41 item 4: a view a full ring left incomplete says so where the verdict is read."""
    watchdog, state, _, out = make_watchdog(tmp_path)
    report = stalled_rank2_report(age_s=11.0)
    report.ranks[1].dropped_records, report.ranks[2].dropped_records = 700, 45
    state.ingest(report, T0)
    watchdog.tick(now=T0, now_unix=1795000000.0)
    [hang] = [line for line in out.getvalue().splitlines() if line.startswith("HANG: ")]
    assert hang.endswith("rule timeout: in flight past --hang-timeout 10 s; ranks 1-2 dropped 745 progress "
                         "records (ring full): their op counts and fingerprints are incomplete; stacks in "
                         f"{tmp_path / 'job1' / '20261118T110640Z'}/"), hang
    doc = json.loads((tmp_path / "job1" / "20261118T110640Z" / "hang.json").read_text())
    assert doc["records_dropped"] == {"ranks": [1, 2], "total": 745}
    assert [r["dropped_records"] for r in doc["ranks"]] == [0, 700, 45, 0]


def test_one_stacks_line_when_the_stacks_are_in_with_the_viewer_command(tmp_path):
    watchdog, state, _, out = make_watchdog(tmp_path)
    state.ingest(stalled_rank2_report(age_s=11.0), T0)
    watchdog.tick(now=T0, now_unix=1795000000.0)
    event = watchdog.declared[0]
    for rank in range(4):
        watchdog.tick(now=T0 + 0.5 + rank)
        assert not stacks_lines(out)                          # not before the last rank is in
        event.add_dump(rank, f"rank{rank:05d}-of-00004.py.json", True, T0 + 1 + rank)
    watchdog.tick(now=T0 + 5)
    watchdog.tick(now=T0 + 6)
    assert stacks_lines(out) == [
        f"STACKS: event {event.event_id}: stacks of 4 rank(s) are in; "
        f"see them with: stack-viewer --path {tmp_path}/job1/{event.event_id}"]


def test_the_stacks_line_names_the_ranks_missing_at_the_dump_deadline(tmp_path):
    watchdog, state, _, out = make_watchdog(tmp_path, dump_timeout_s=30.0)
    state.ingest(stalled_rank2_report(age_s=11.0), T0)
    watchdog.tick(now=T0, now_unix=1795000000.0)
    event = watchdog.declared[0]
    event.add_dump(0, "rank00000-of-00004.py.json", True, T0 + 1)
    event.add_dump(1, "rank00001-of-00004.py.json", False, T0 + 1)
    watchdog.tick(now=T0 + 29)
    assert not stacks_lines(out)
    watchdog.tick(now=T0 + 30)
    assert stacks_lines(out) == [(
        f"STACKS: event {event.event_id}: stacks of 2 rank(s) are in; no stacks from ranks 2-3; "
        f"see them with: stack-viewer --path {tmp_path}/job1/{event.event_id}")]


def stacks_lines(out):
    return [line for line in out.getvalue().splitlines() if line.startswith("STACKS:")]
