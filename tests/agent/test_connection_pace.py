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
