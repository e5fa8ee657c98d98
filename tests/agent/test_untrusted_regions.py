"""The sampler and the node state against a worker that wrote garbage into its
region (issue 33 item 5): the region is skipped or bounded with one line, the
pass stays short, and every other rank is still reported."""

from __future__ import annotations

import dataclasses
import os
import threading

import pytest

from diag.agent.sampler import Sampler
from diag.agent.state import NodeState
from diag.records import format as fmt
from tests.agent.test_agent import children, writer_for  # noqa: F401 (fixture)
from tests.records.test_untrusted import scribble

pytestmark = pytest.mark.timeout(60)


def sample_within(sampler: Sampler, seconds: float = 10.0) -> None:
    """One sampler pass, which must end (before the fix it spun forever)."""
    done = threading.Event()
    threading.Thread(target=lambda: (sampler.sample(), done.set()), daemon=True).start()
    assert done.wait(seconds), "the sampler's pass did not end"


def test_the_issues_garbage_region_is_skipped_with_one_line(tmp_path, children):
    good, bad = children(), children()
    writer_for(tmp_path, good.pid, rank=0, world=2).start(fmt.KIND_COLLECTIVE, "all_reduce", seq=3)
    garbage = writer_for(tmp_path, bad.pid, rank=1, world=2)
    scribble(garbage.path)
    logs = []
    state = NodeState()
    sampler = Sampler(str(tmp_path), state, os.getpid(), logs.append)
    sample_within(sampler)
    sample_within(sampler)
    assert list(state.ranks) == [0]
    assert state.report()[0].oldest_in_flight.seq == 3          # the rest of the node is judged
    [line] = logs
    assert line.startswith(f"skipping region {garbage.path}: world size -7 is not within 1..")


def test_a_region_scribbled_mid_run_is_bounded_and_its_rank_still_reported(tmp_path, children):
    good, bad = children(), children()
    writer_for(tmp_path, good.pid, rank=0, world=2).start(fmt.KIND_COLLECTIVE, "all_reduce", seq=3)
    victim = writer_for(tmp_path, bad.pid, rank=1, world=2)
    op = victim.start(fmt.KIND_COLLECTIVE, "all_reduce", seq=3)
    logs = []
    state = NodeState()
    sampler = Sampler(str(tmp_path), state, os.getpid(), logs.append)
    sample_within(sampler)
    scribble(victim.path)                       # while rank 1 waits in its all_reduce
    sample_within(sampler)
    sample_within(sampler)
    assert [(p.rank, p.oldest_in_flight.seq) for p in state.report()] == [(0, 3), (1, 3)]
    index, records = logs
    assert index.startswith(f"region {victim.path}: write index {2**63 - 5} ") and "records lost" in index
    assert records.startswith(f"region {victim.path}: skipping records") and "(4096 so far)" in records
    # The worker goes on: its own count is read again, and its op ends.
    victim.end(op, fmt.KIND_COLLECTIVE, "all_reduce", duration_ns=5, seq=3)
    sample_within(sampler)
    [_, rank1] = state.report()
    assert not rank1.HasField("oldest_in_flight") and [s.name for s in rank1.stats] == ["all_reduce"]
    assert len(logs) == 2                       # each said once


def test_a_region_shrunk_mid_run_is_skipped_and_its_worker_still_exits(tmp_path, children):
    worker = children()
    writer = writer_for(tmp_path, worker.pid)
    writer.start(fmt.KIND_COLLECTIVE, "all_reduce", seq=1)
    logs = []
    state = NodeState()
    sampler = Sampler(str(tmp_path), state, os.getpid(), logs.append)
    sample_within(sampler)
    os.truncate(writer.path, 0)
    sample_within(sampler)
    [line] = logs
    assert line.startswith(f"skipping region {writer.path}: reading it failed: ") and "shrunk" in line
    assert state.report()[0].alive
    worker.kill()
    worker.wait()
    sample_within(sampler)
    assert not state.report()[0].alive and not os.path.exists(writer.path)


def test_a_rank_whose_records_overflow_a_report_is_reported_bare(tmp_path):
    logs = []
    state = NodeState(log=logs.append)
    for rank in (0, 1):
        state.add_region(f"r{rank}", fmt.Header(4096, 100 + rank, rank, rank, 2, fmt.PRODUCER_PYTHON, 0, 0, 0))
    end = fmt.Record(fmt.EVENT_END, fmt.KIND_HOST_FUNC, 0, -1, 1, 0, 0, 10, 2**63, 0, 0, 1, 0, "f")
    state.apply("r0", [dataclasses.replace(end, duration_ns=5)])
    state.apply("r1", [end, end])               # 2 * 2^63 ns: past a uint64
    r0, r1 = state.report()
    assert [s.total_ns for s in r0.stats] == [5]
    assert (r1.rank, r1.pid, r1.alive, list(r1.stats)) == (1, 101, True, [])
    [line] = logs
    assert line.startswith("rank 1 (pid 101): its records do not fit a report (")
    state.apply("r1", [end, end])
    assert len(state.report()) == 2 and len(logs) == 1
