"""Collectives that DDP issues from C++ on gloo are recorded (diag/tracer/dispatch.py)."""

from __future__ import annotations

import pytest

from diag.records import format as fmt
from tests.tracer.test_tracer import records_by_rank, result_lines, run_ranks

pytestmark = pytest.mark.timeout(180)
STALL_S = 2.0


def test_ddp_collectives_from_cpp_are_recorded_with_start_and_unchanged_results(tmp_path):
    # Rank 1 stalls between its forward and its backward at step 1.
    traced = run_ranks_args(tmp_path, ["1", "backward", str(STALL_S), "2"])
    plain = run_ranks_args(tmp_path / "off", ["-1", "none", "0", "2"], {"XPU_TIMER_TRACER_DISABLE": "1"})
    assert result_lines(traced) == result_lines(plain)          # same gradients, traced or not

    regions = records_by_rank(tmp_path)
    starts, ends = {}, {}
    for rank, (_, records, dropped) in regions.items():
        assert dropped == 0
        starts[rank] = [r for r in records if r.event == fmt.EVENT_START]
        ends[rank] = {r.op_id: r for r in records if r.event == fmt.EVENT_END}
        assert set(ends[rank]) == {r.op_id for r in starts[rank]}, rank   # every op ended
    order = {rank: [(r.name, r.comm_id, r.seq) for r in s] for rank, s in starts.items()}
    # DDP's shape check, its state broadcast, each forward's buffer broadcast and each
    # backward's bucket all-reduce: one sequence, the same on both ranks, seq 1, 2, ...
    assert order[0] == order[1]
    assert [seq for _, _, seq in order[0]] == list(range(1, len(order[0]) + 1))
    names = [name for name, _, _ in order[0]]
    assert names[0] == "all_gather" and names.count("all_reduce") == 2 and "broadcast" in names
    assert all(r.kind == fmt.KIND_COLLECTIVE and r.comm_size == 2 for r in starts[0])

    # START at the call: rank 0 sat in step 1's all_reduce while rank 1, stalled
    # before its backward, had nothing in flight.
    r0 = [r for r in starts[0] if r.name == "all_reduce"][1]
    r1 = [r for r in starts[1] if r.name == "all_reduce"][1]
    assert (ends[0][r0.op_id].t_mono_ns - r0.t_mono_ns) > 0.75 * STALL_S * 1e9
    assert r1.t_mono_ns - r0.t_mono_ns > 0.75 * STALL_S * 1e9
    before = [r for r in starts[1] if r.t_mono_ns < r1.t_mono_ns]
    assert all(ends[1][r.op_id].t_mono_ns < r0.t_mono_ns + 0.25e9 for r in before)


def run_ranks_args(shm, args, env=None):
    return run_ranks("ddp.py", shm, env, world=2, args=args)
