"""Issue 21: the agent obeys the collector's ReportPace within bounds, and a
new stream starts at its own pace. (The whole path, a real collector pacing a
real agent under overload, is tests/collector/test_collector_overload.py.)"""

from __future__ import annotations

from diag.agent.config import AgentConfig
from diag.agent.connection import MAX_PACE_S, MAX_PERF_EVERY, Connection
from diag.pb import collector_pb2 as pb


class _Agent:
    def __init__(self):
        self.said = []

    def log(self, message, every=60.0):
        self.said.append(message)


def test_pace_is_bounded_and_said_once_each_way(tmp_path):
    agent = _Agent()
    conn = Connection(AgentConfig(shm_dir=str(tmp_path), collector="127.0.0.1:1", token="t", job_id="j",
                                  report_interval=0.5), agent)
    try:
        conn.pace(pb.ReportPace(interval_ms=2000, perf_every=10))
        assert (conn.interval, conn.perf_every) == (2.0, 10)
        conn.pace(pb.ReportPace(interval_ms=2000, perf_every=10))   # the same again: nothing new said
        conn.pace(pb.ReportPace(interval_ms=600_000, perf_every=100_000))
        assert (conn.interval, conn.perf_every) == (MAX_PACE_S, MAX_PERF_EVERY)
        conn.pace(pb.ReportPace(interval_ms=100))   # never faster than our own interval
        assert (conn.interval, conn.perf_every) == (0.5, 1)
        conn.pace(pb.ReportPace(interval_ms=4000, perf_every=10))
        conn.pace(None)                              # a new stream: our own pace, silently
        assert (conn.interval, conn.perf_every) == (0.5, 1)
    finally:
        conn.close()
    assert agent.said == ["the collector is behind: reporting every 2 s, the perf window every 10 report(s)",
                          "the collector is behind: reporting every 10 s, the perf window every 60 report(s)",
                          "the collector caught up: reporting at our own pace",
                          "the collector is behind: reporting every 4 s, the perf window every 10 report(s)"]


def test_a_slower_pace_counts_from_the_last_report_and_a_quicker_one_keeps_the_phase():
    from diag.agent.connection import next_due
    assert next_due(10.0, 1.0, 0.0) == 11.0       # no change since the report
    assert next_due(10.0, 4.0, 10.5) == 14.0      # slower: from the last report
    assert next_due(10.0, 1.0, 12.5) == 13.0      # quicker: the next multiple after the change
    assert next_due(10.0, 1.0, 10.3) == 11.0      # quicker, within the first new interval
    assert next_due(10.0, 1.0, 13.0) == 13.0


def test_agents_told_at_once_that_the_collector_caught_up_do_not_report_at_once():
    """1,000 agents at a 4 s pace, their last reports spread over 4 s, told at
    t = 4 to report every 1 s: their next reports spread over [4, 5), as their
    phases were, not a burst at 4 (three in four of them, counted from the change)."""
    from diag.agent.connection import next_due
    due = sorted(next_due(4.0 * i / 1000, 1.0, 4.0) for i in range(1000))
    assert 4.0 <= due[0] and due[-1] < 5.0
    per_tenth = [sum(1 for d in due if 4.0 + k / 10 <= d < 4.0 + (k + 1) / 10) for k in range(10)]
    assert max(per_tenth) <= 110, per_tenth
    counted_from_change = sum(1 for i in range(1000) if 4.0 * i / 1000 + 1.0 <= 4.0)
    assert counted_from_change >= 740   # what the old rule sent at once
