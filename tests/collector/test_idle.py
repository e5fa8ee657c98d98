"""The idle rule (diag/hang/idle.py) and its verdict (diag/collector/verdict.py): every live rank blocked outside any op."""

import json

from diag.hang.detector import IdleDetector
from diag.hang.idle import find_idle
from diag.collector.state import JobState
from diag.pb import collector_pb2 as pb
from tests.collector.fakes import node_report, rank_progress
from tests.collector.test_collector_rules import T0, make_watchdog
from diag.collector.servicer import AgentSession

IDLE = 60.0
CHECKPOINT = dict(name="save_checkpoint", kind=pb.OP_KIND_HOST_FUNC)


def idle_job(idle_s, world=4, per_rank=None):
    """Every rank idle for ``idle_s``; ``per_rank`` overrides: rank -> rank_progress kwargs."""
    ranks = []
    for r in range(world):
        kwargs = dict(idle_s=idle_s, last_op="all_reduce") | (per_rank or {}).get(r, {})
        ranks.append(rank_progress(r, world, **kwargs))
    return node_report(0, ranks)


def find(state, now, silent=()):
    return find_idle(state.snapshot(now), IDLE, set(silent))


def test_idle_only_once_every_live_rank_passed_the_timeout_with_nothing_in_flight():
    state = JobState()
    state.ingest(idle_job(50.0), T0)
    assert find(state, T0 + 9.9) is None                       # 59.9 s: never before the timeout
    stall = find(state, T0 + 10.5)
    assert stall.ranks == (0, 1, 2, 3) and abs(stall.idle_s - 60.5) < 1e-6
    # One rank active a moment ago: the job is not idle.
    state.ingest(idle_job(50.0, per_rank={2: dict(idle_s=0.5)}), T0)
    assert find(state, T0 + 10.5) is None


def test_a_named_host_function_in_flight_keeps_the_job_from_being_idle():
    state = JobState()
    state.ingest(idle_job(500.0, per_rank={0: dict(op=CHECKPOINT, age_s=500.0)}), T0)
    assert find(state, T0) is None


def test_silent_agents_rule_it_out_and_exited_ranks_are_listed_not_judged():
    state = JobState()
    state.ingest(idle_job(70.0), T0)
    assert find(state, T0, silent={0}) is None
    report = idle_job(70.0)
    report.ranks[3].alive = False
    state.ingest(report, T0)
    stall = find(state, T0)
    assert stall.ranks == (0, 1, 2) and stall.exited_ranks == (3,)
    for rank in report.ranks:
        rank.alive = False
    state.ingest(report, T0)
    assert find(state, T0) is None                              # nothing live: the job is done


def test_detector_fires_once_and_rearms_when_a_rank_is_active_again():
    state, detector = JobState(), IdleDetector()
    state.ingest(idle_job(61.0), T0)
    assert detector.update(find(state, T0), state.snapshot(T0))
    state.ingest(idle_job(62.0), T0 + 1.0)                     # same last activity, reported again
    assert not detector.update(find(state, T0 + 1.0), state.snapshot(T0 + 1.0))
    state.ingest(idle_job(61.0, per_rank={1: dict(idle_s=0.2)}), T0 + 2.0)   # an op ran: over
    assert not detector.update(find(state, T0 + 2.0), state.snapshot(T0 + 2.0))
    state.ingest(idle_job(61.0), T0 + 63.0)                    # idle again: a new event
    assert detector.update(find(state, T0 + 63.0), state.snapshot(T0 + 63.0))


def test_watchdog_declares_an_idle_stall_with_stacks_and_a_distinct_reason(tmp_path):
    watchdog, state, registry, out = make_watchdog(tmp_path, idle_timeout_s=IDLE)
    session = AgentSession(0, "n0", 9000)
    registry.add(session)
    report = idle_job(70.0)
    report.ranks[2].last_op = "load_batch"
    state.ingest(report, T0)
    watchdog.tick(now=T0, now_unix=1795000000.0)
    watchdog.tick(now=T0 + 0.5, now_unix=1795000000.5)
    event_dir = tmp_path / "job1" / "20261118T110640Z"
    assert out.getvalue().splitlines() == [
        "HANG: idle: ranks 0-3 started or finished no op for 70.0 s (idle timeout 60.0 s), none in flight; "
        f"last op all_reduce on ranks 0-1,3, load_batch on rank 2; stacks in {event_dir}/"]
    doc = json.loads((event_dir / "hang.json").read_text())
    assert (doc["reason"], doc["timeout_s"], doc["idle_ranks"], doc["hung_ranks"], doc["culprits"]) == (
        "idle", IDLE, [0, 1, 2, 3], [], [])
    assert [row["last_op"] for row in doc["ranks"]] == ["all_reduce", "all_reduce", "load_batch", "all_reduce"]
    assert [c.dump_stacks.event_id for c in session.commands if c.HasField("dump_stacks")] == ["20261118T110640Z"]
    assert [c.persist_last_words.event_id for c in session.commands if c.HasField("persist_last_words")] == [
        "20261118T110640Z"]   # last words on every HANG (docs/recovery.md)
