"""The open-op table's lane rule (diag/records/inflight.py), fed plain
records as the producers write them: the one rule the agent's state and its
timeline ring both keep."""

import pytest

from diag.records import format as fmt
from diag.records.inflight import OpenOps

COLL, P2P = fmt.KIND_COLLECTIVE, fmt.KIND_P2P


def rec(event, op_id, seq, kind=COLL, comm_id=7):
    return fmt.Record(event, kind, 0, 0, op_id, comm_id, seq, 0, 0, 64, 0, 1, 4, "op")


def started(table, region, *recs):
    for r in recs:
        assert table.start(region, r.op_id, r)
    return table


def open_seqs(table):
    return sorted((region, op.kind, op.comm_id, op.seq) for (region, _), op in table.items())


def test_an_end_ends_its_lanes_earlier_ops_whose_ends_were_lost():
    table = started(OpenOps(), "r", rec(1, 1, 1), rec(1, 2, 2), rec(1, 3, 3), rec(1, 4, 4))
    ended = table.end("r", rec(2, 3, 3))
    assert (ended.op_id, ended.seq) == (3, 3)
    assert open_seqs(table) == [("r", COLL, 7, 4)]   # seqs 1 and 2 lost their END; 4 is later


def test_the_rule_stays_within_one_lane_one_communicator_one_region():
    table = started(OpenOps(), "r",
                    rec(1, 1, 1),                    # collective seq 1 of comm 7: hung
                    rec(1, 2, 1, kind=P2P),          # p2p seq 1 of comm 7: its END was lost
                    rec(1, 3, 1, comm_id=8))         # collective seq 1 of another comm
    started(table, "other", rec(1, 1, 1))             # same comm and lane, another region
    table.start("r", 4, rec(1, 4, 5, kind=P2P))
    assert table.end("r", rec(2, 4, 5, kind=P2P)).seq == 5
    assert open_seqs(table) == [("other", COLL, 7, 1), ("r", COLL, 7, 1), ("r", COLL, 8, 1)]


def test_unnumbered_ops_and_ops_on_no_lane_end_only_by_their_own_end():
    # The tracer's p2p ops carry seq 0; GEMMs and host functions are on no lane.
    table = started(OpenOps(), "r", rec(1, 1, 0, kind=P2P), rec(1, 2, 1, kind=fmt.KIND_GEMM),
                    rec(1, 3, 2, kind=fmt.KIND_GEMM))
    table.start("r", 4, rec(1, 4, 0, kind=P2P))
    assert table.end("r", rec(2, 4, 0, kind=P2P)) is not None
    assert table.end("r", rec(2, 3, 2, kind=fmt.KIND_GEMM)) is not None
    assert sorted(op_id for _, op_id in table) == [1, 2]


def test_an_end_whose_start_was_never_listed_still_applies_the_rule():
    table = started(OpenOps(), "r", rec(1, 1, 1))
    assert table.end("r", rec(2, 9, 2)) is None   # its START came before the reader
    assert not table


def test_a_full_table_lists_no_more_and_a_gone_region_forgets_its_ops():
    table = OpenOps(cap=2)
    assert table.start("a", 1, rec(1, 1, 1)) and table.start("b", 1, rec(1, 1, 1))
    assert not table.start("a", 2, rec(1, 2, 2)) and len(table) == 2
    table.forget_region("a")
    assert list(table) == [("b", 1)]
    with pytest.raises(ValueError, match="cap 0"):
        OpenOps(cap=0)
