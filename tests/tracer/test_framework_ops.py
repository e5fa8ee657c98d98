"""The collectives Megatron-Core, DeepSpeed and torchtitan issue, traced on gloo.

Each must be recorded once, under its own name, in one sequence with the
rest of its group on every rank, and end from its real completion: the peer
holds back before each op marked late in tests/scripts/framework_ops.py, so
the waiting rank's op lasts that long. Results equal the untraced run.
"""

from __future__ import annotations

import pytest

from diag.records import format as fmt
from tests.tracer.test_tracer import records_by_rank, result_lines, run_ranks

pytestmark = pytest.mark.timeout(120)
DELAY_S = 0.6
# (name, held back by the peer before it)
EXPECTED = [("reduce_scatter_tensor", True), ("all_gather_into_tensor", False),   # coalesced
            ("all_gather_into_tensor", True), ("reduce_scatter_tensor", False),
            ("all_to_all_single", True),
            ("all_reduce", True), ("all_reduce", True), ("all_reduce", True), ("all_reduce", True),
            ("all_reduce", False),
            # functional collectives (DTensor, torchtitan's TP): ended at their wait_tensor
            ("all_reduce", True), ("all_gather_into_tensor", False), ("reduce_scatter_tensor", False)]


def test_framework_ops_are_recorded_once_by_name_and_end_at_completion(tmp_path):
    traced = run_ranks("framework_ops.py", tmp_path, args=[str(DELAY_S)])
    plain = run_ranks("framework_ops.py", tmp_path / "off", {"XPU_TIMER_TRACER_DISABLE": "1"},
                      args=[str(DELAY_S)])
    assert result_lines(traced) == result_lines(plain)
    regions = records_by_rank(tmp_path)
    seqs = {}
    for rank, (_, records, dropped) in regions.items():
        assert dropped == 0
        starts = [r for r in records if r.event == fmt.EVENT_START]
        ends = {r.op_id: r for r in records if r.event == fmt.EVENT_END}
        assert set(ends) == {r.op_id for r in starts}, rank          # every op ended
        batch, *colls = starts
        assert (batch.name, batch.kind, batch.seq) == ("batch_isend_irecv", fmt.KIND_P2P, 0)
        # One record per op: the coalesced op the manager issues is not a second one.
        assert [r.name for r in colls] == [name for name, _ in EXPECTED], rank
        assert len({r.comm_id for r in colls}) == 1 and colls[0].comm_id != 0
        seqs[rank] = [r.seq for r in colls]
        if rank == 0:   # rank 1 holds back: rank 0's ops last as long
            for record, late in zip(starts, [True] + [late for _, late in EXPECTED]):
                took = ends[record.op_id].t_mono_ns - record.t_mono_ns
                if late:
                    assert took > 0.8 * DELAY_S * 1e9, (record.name, record.seq, took)
    assert seqs[0] == seqs[1] == list(range(1, len(EXPECTED) + 1))
