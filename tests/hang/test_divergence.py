"""The divergence rule (diag/hang/divergence.py) on plain data: the stuck seq,
where the fingerprints differ and who skipped what."""

from diag.hang.api import Findings, HungGroup, OpKey
from diag.hang.divergence import DivergenceRule
from diag.pb import collector_pb2 as pb
from tests.hang.views import case, view

BUCKET = pb.Fingerprint(name="ncclAllReduce", bytes=98 << 20, dtype=9, reduce_op=0, peer=-1)
SMALL = pb.Fingerprint(name="ncclAllReduce", bytes=64 << 20, dtype=9, reduce_op=0, peer=-1)
LOSS = pb.Fingerprint(name="ncclAllReduce", bytes=4, dtype=7, reduce_op=0, peer=-1)


def member(rank, ops, completed):
    p = pb.RankProgress(rank=rank, world_size=2, pid=100 + rank, alive=True)
    comm = p.comms.add(comm_id=0, last_started_seq=len(ops), last_completed_seq=completed, comm_size=2,
                       lane=pb.OP_KIND_COLLECTIVE, group_name="default")
    comm.recent.first_seq = 1
    comm.recent.ops.extend(ops)
    p.oldest_in_flight.CopyFrom(pb.InFlightOp(name="ncclAllReduce", kind=pb.OP_KIND_COLLECTIVE, seq=completed + 1,
                                              age_ns=12_000_000_000))
    return p


def test_a_rank_that_skipped_the_loss_all_reduce_and_ran_ahead_is_named():
    # Both ran a step's two buckets; rank 0 then the 4-byte loss all_reduce,
    # rank 1 skipped it and ran on into two more steps.
    v = view({0: member(0, [BUCKET, SMALL, LOSS], 2), 1: member(1, [BUCKET, SMALL] * 3, 2)})
    hung = (HungGroup(OpKey("ncclAllReduce", pb.OP_KIND_COLLECTIVE, 0, 3), (0, 1), 12.0),)
    c = case(v, findings=Findings(world_size=2, hung=hung))
    found = DivergenceRule().judge(c)
    (m,) = found.mismatches
    assert m.diverged_seq == 3 and m.culprits == (1,)
    # 1 against 1: the seqs alone cannot tell, but the rank that ran on past the others can
    assert m.tie and m.summary.endswith("rank 1 ran 3 ops ahead (at seq 6)"), m.summary
    assert found.fired[-1].rule == "divergence" and m.summary in found.fired[-1].evidence
    assert [g.name for g in found.groups] == ["default"] and c.members[(0, pb.OP_KIND_COLLECTIVE)] == {0: 3, 1: 6}


def test_members_that_agree_give_the_stuck_seq_and_no_finding():
    v = view({r: member(r, [BUCKET, SMALL, LOSS], 2) for r in (0, 1)})
    hung = (HungGroup(OpKey("ncclAllReduce", pb.OP_KIND_COLLECTIVE, 0, 3), (0, 1), 12.0),)
    found = DivergenceRule().judge(case(v, findings=Findings(world_size=2, hung=hung)))
    assert found.mismatches == () and found.fired == ()
    assert [(s.seq, s.from_seq) for s in found.stuck] == [(3, 3)]
