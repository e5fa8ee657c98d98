"""A report's op ages and its sent_mono_ns are one instant: the collector
places a hung op's start at sent - age, and reads between the two (the GPU's
health, the process tree's counters) that took a second on a loaded host
moved that start by as much, so the HANG already declared for it was taken
as over and declared again."""

from __future__ import annotations

import time

from diag.agent.agent import Agent
from diag.agent.config import AgentConfig
from diag.records import format as fmt
from tests.agent.test_agent import children, writer_for  # noqa: F401 (children: the fixture)


def test_a_slow_report_places_the_ops_start_where_it_was(tmp_path, children, monkeypatch):  # noqa: F811
    child = children()
    writer = writer_for(tmp_path, child.pid)
    agent = Agent(AgentConfig(shm_dir=str(tmp_path), collector="", token="t", job_id="instant",
                              gpu_sample_interval_s=60))
    try:
        before = time.monotonic_ns()
        writer.start(fmt.KIND_COLLECTIVE, "all_reduce", seq=1)
        after = time.monotonic_ns()
        agent.sample_once()
        slow_read = agent._add_activity

        def slow(*args):   # the process tree read as a loaded host takes it
            time.sleep(1.2)
            return slow_read(*args)
        monkeypatch.setattr(agent, "_add_activity", slow)
        report = agent.build_report()
        [rank] = report.ranks
        assert rank.oldest_in_flight.name == "all_reduce"
        placed = report.sent_mono_ns - rank.oldest_in_flight.age_ns
        assert before <= placed <= after, (placed - before) / 1e9
    finally:
        agent.stopping.set()
