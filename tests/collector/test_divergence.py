"""Divergence of a hung group's members, pure rules with a fake clock: which
seq they diverged at, who ran what there, who ran ahead, the exact stuck seq
and the HANG line / hang.json it gives. The reports are what the agent sends
(tests/agent/test_lanes.py builds them from records)."""

from diag.collector import verdict
from diag.hang.api import Limits
from diag.hang.decide import analyse
from diag.collector.state import JobState
from diag.pb import collector_pb2 as pb
from tests.collector.fakes import node_report, rank_progress

T0 = 1000.0
AR = ("ncclAllReduce", 7, 0, -1)          # name, dtype float32, sum, no peer
BUCKET = ("ncclAllReduce", 9, 0, -1)      # bfloat16 DDP bucket


def fp(op, nbytes, step=0):
    name, dtype, red, peer = op
    return pb.Fingerprint(name=name, bytes=nbytes, dtype=dtype, reduce_op=red, peer=peer)


def rank(r, world, ops, *, completed, age_s=12.0, comm_id=0, name="default", lane=pb.OP_KIND_COLLECTIVE,
         in_flight=None):
    """A rank that started ``ops`` (list of (op, bytes), seq 1..) and completed
    the first ``completed``; in flight in op ``in_flight`` (default: the
    first not completed) for ``age_s``."""
    p = pb.RankProgress(rank=r, world_size=world, pid=100 + r, alive=True, last_op=ops[-1][0][0])
    # (op, bytes) or (op, bytes, the optimizer step it started in)
    comm = p.comms.add(comm_id=comm_id, last_started_seq=len(ops), last_completed_seq=completed,
                       comm_size=world, lane=lane, group_name=name)
    comm.recent.first_seq = 1
    comm.recent.ops.extend(fp(*o) for o in ops)
    comm.recent_steps.step.extend(o[2] if len(o) > 2 else 0 for o in ops)
    comm.recent_steps.into_step_ns.extend(0 for _ in ops)
    seq = in_flight or completed + 1
    if seq <= len(ops):
        op, nbytes = ops[seq - 1][:2]
        p.oldest_in_flight.CopyFrom(pb.InFlightOp(name=op[0], kind=lane, comm_id=comm_id, seq=seq,
                                                  age_ns=int(age_s * 1e9), bytes=nbytes))
    return p


def judge(ranks):
    state = JobState()
    state.ingest(node_report(0, ranks), T0)
    snap = state.snapshot(T0)
    findings = analyse(snap, Limits(10.0, 60.0))
    doc = verdict.hang_document(findings, snap, job_id="j", event_id="e", event_dir="/ev", declared_unix=0.0,
                                timeout_s=10.0)
    return findings, verdict.hang_line(findings, "/ev"), doc


STEP = [(BUCKET, 98 << 20), (BUCKET, 64 << 20)]


def test_a_rank_that_skipped_a_collective_ran_ahead_and_is_named():
    # Rank 1 skipped the 4-byte loss all_reduce (seq 3) and ran on into the next step.
    rank0 = STEP + [(AR, 4)]
    rank1 = STEP + STEP + STEP
    findings, line, doc = judge([rank(0, 2, rank0, completed=2), rank(1, 2, rank1, completed=2)])
    assert line.startswith('HANG: ranks 0-1 in ncclAllReduce (group "default" (ranks 0-1), seq 3) for 12.0 s; '
                           "the ranks diverged at seq 3: rank 0 all_reduce 4 B (float32, sum), "
                           "rank 1 all_reduce 98 MiB (bfloat16, sum) (1 against 1: ")
    assert "rank 1 ran 3 ops ahead (at seq 6)" in line and "every reporting rank waits" not in line
    assert doc["culprits"] == [1]
    [group] = doc["mismatch"]["groups"]
    assert (group["diverged_seq"], group["stuck_seq"], group["tie"], group["minority"]) == (3, 3, True, [])
    assert group["ahead"] == [{"rank": 1, "last_started_seq": 6, "by": 3}]
    assert "1 against 1" in group["culprit_note"] and "rank 1 ran ahead" in group["culprit_note"]
    assert doc["mismatch"]["summary"] in line and "\n" not in doc["mismatch"]["summary"]
    assert doc["groups"] == [{"comm_id": 0, "name": "default", "ranks": "0-1"}]


def test_a_different_collective_at_the_same_seq_names_the_minority():
    gather = ("ncclAllGather", 7, -1, -1)
    common = [(AR, 1024), (AR, 1024)]
    ranks = [rank(r, 4, common + [(AR, 4096)], completed=2) for r in (0, 1, 3)]
    ranks.insert(2, rank(2, 4, common + [(gather, 4096)], completed=2))
    findings, line, doc = judge(ranks)
    assert ("the ranks diverged at seq 3: ranks 0-1,3 all_reduce 4 KiB (float32, sum), "
            "rank 2 all_gather 4 KiB (float32)") in line
    assert doc["culprits"] == [2] and doc["mismatch"]["groups"][0]["minority"] == [2]


def test_the_same_collective_with_different_sizes():
    ranks = [rank(r, 3, [(AR, 1024), (AR, 4 if r == 1 else 8)], completed=1) for r in range(3)]
    _, line, doc = judge(ranks)
    assert "diverged at seq 2: ranks 0,2 all_reduce 8 B (float32, sum), rank 1 all_reduce 4 B" in line
    assert doc["culprits"] == [1]


def test_one_collective_more_is_a_rank_behind_not_a_mismatch():
    # Ranks 0 and 1 call an extra barrier-like all_reduce (seq 3); rank 2 finished at seq 2.
    ranks = [rank(r, 3, [(AR, 8)] * 3, completed=2) for r in (0, 1)]
    idle = rank(2, 3, [(AR, 8)] * 2, completed=2)
    _, line, doc = judge(ranks + [idle])
    assert doc["mismatch"] is None and doc["culprits"] == [2]
    assert 'rank 2 not in any collective (at seq 2 on group "default")' in line


def test_agreeing_members_give_no_mismatch_and_the_same_line_as_before():
    ranks = [rank(r, 2, [(AR, 8)] * 5, completed=4) for r in range(2)]
    findings, line, doc = judge(ranks)
    assert findings.mismatches == () and doc["mismatch"] is None
    assert line.endswith("no rank is behind: every reporting rank waits; stacks in /ev/")


def test_healthy_job_is_quiet_even_with_fingerprints_and_ranks_at_different_seqs():
    ranks = [rank(r, 2, [(AR, 8)] * (5 + r), completed=4 + r, age_s=0.5) for r in range(2)]
    findings, _, _ = judge(ranks)
    assert not findings.is_hang and findings.mismatches == ()


def test_stuck_seq_is_exact_when_a_member_saw_completion_of_a_burst():
    # Fence completion: rank 0 knows only that seq 3..6 (one burst) did not all end;
    # rank 1 saw seq 3 and 4 complete, so the op stuck on every member is seq 5.
    burst = [(AR, 8)] * 6
    r0 = rank(0, 2, burst, completed=2)
    r1 = rank(1, 2, burst, completed=4)
    findings, line, doc = judge([r0, r1])
    assert sorted(g.op.seq for g in findings.hung) == [3, 5] and findings.stuck[0].seq == 5
    assert line.startswith('HANG: ranks 0-1 in ncclAllReduce (group "default" (ranks 0-1), seq 5) for 12.0 s;')
    assert {op["stuck_seq"] for op in doc["hung_ops"]} == {5}


def test_p2p_lane_never_counts_as_entering_a_collective():
    # Rank 1 sent 200 p2p ops on the default group but never started collective seq 5.
    ranks = [rank(0, 2, [(AR, 8)] * 5, completed=4)]
    r1 = rank(1, 2, [(AR, 8)] * 4, completed=4)
    collective = pb.CommProgress()
    collective.CopyFrom(r1.comms[0])
    del r1.comms[:]
    r1.comms.add(comm_id=0, last_started_seq=200, last_completed_seq=200, comm_size=2, lane=pb.OP_KIND_P2P)
    r1.comms.append(collective)                           # the p2p lane comes first
    ranks.append(r1)
    findings, line, doc = judge(ranks)
    assert doc["culprits"] == [1] and [(n.rank, n.last_started_seq) for n in findings.never_entered] == [(1, 4)]
    assert 'rank 1 not in any collective (at seq 4 on group "default")' in line


def test_a_named_subgroup_is_shown_by_name_with_its_ranks():
    ranks = [rank(r, 4, [(AR, 8)] * 3, completed=2, comm_id=77, name="tp") for r in (1, 3)]
    ranks += [pb.RankProgress(rank=r, world_size=4, pid=100 + r, alive=True) for r in (0, 2)]
    _, line, doc = judge(ranks)
    assert 'in ncclAllReduce (group "tp" (ranks 1,3), seq 3)' in line
    assert doc["hung_ops"][0]["group"] == "tp" and doc["hung_ops"][0]["comm_id"] == 77


def test_running_ahead_without_a_divergence_blames_no_one():
    # Both ranks agree on every seq; rank 1's host launched two more before the hang.
    ranks = [rank(0, 2, [(AR, 8)] * 5, completed=2), rank(1, 2, [(AR, 8)] * 7, completed=2)]
    findings, line, doc = judge(ranks)
    assert "rank 1 ran 2 ops ahead (at seq 7)" in line and doc["culprits"] == []
    assert doc["mismatch"]["groups"][0]["diverged_seq"] is None


def test_a_rank_behind_the_exact_stuck_seq_never_entered_it():
    # Rank 0 reports its burst's first op (seq 3); rank 1 saw 3 and 4 complete;
    # rank 2 stopped after seq 4: it never entered seq 5, the op truly stuck.
    burst = [(AR, 8)] * 6
    ranks = [rank(0, 3, burst, completed=2), rank(1, 3, burst, completed=4),
             rank(2, 3, burst[:4], completed=4)]
    findings, line, doc = judge(ranks)
    assert [(n.rank, n.op.seq, n.last_started_seq) for n in findings.never_entered] == [(2, 5, 4)]
    assert 'rank 2 not in any collective (at seq 4 on group "default")' in line and doc["culprits"] == [2]


SEND = dict(name="send", kind=pb.OP_KIND_P2P)


def p2p_hang(comm_id, name, p2p_lane):
    """Rank 0 hangs in a tracer send (unnumbered: seq 0) on group ``comm_id``;
    rank 1 never posted its recv. Both ran 3 all_reduces on the group; rank 0
    reports its p2p lane when ``p2p_lane`` (the agent does now), else not."""
    r0 = rank_progress(0, 2, op=SEND, age_s=12.0, comm_id=comm_id, seq=0, started=3, group_name=name,
                       last_op="send")
    if p2p_lane:
        r0.comms.add(comm_id=comm_id, comm_size=2, lane=pb.OP_KIND_P2P, group_name=name)
    return [r0, rank_progress(1, 2, comm_id=comm_id, started=3, group_name=name)]


def test_a_p2p_hang_names_its_group_exactly_as_a_collective_does():
    for comm_id, name in ((0, "default"), (77, "pp")):
        for p2p_lane in (True, False):
            _, line, doc = judge(p2p_hang(comm_id, name, p2p_lane))
            assert line.startswith(f'HANG: rank 0 in send (group "{name}" (ranks 0-1), p2p) for 12.0 s'), line
            assert "rank 1 not in any collective" in line and doc["culprits"] == [1]
            assert doc["groups"] == [{"comm_id": comm_id, "name": name, "ranks": "0-1"}]
            assert doc["hung_ops"][0]["group"] == name and doc["hung_ops"][0]["kind"] == "p2p"


def test_a_p2p_only_group_is_named_by_its_p2p_lane():
    # No collective ever ran on "pp": its name comes from the p2p lanes alone.
    ranks = [rank_progress(r, 3, comm_id=77, started=0, lane=pb.OP_KIND_P2P, group_name="pp") for r in (1, 2)]
    ranks[0].oldest_in_flight.CopyFrom(pb.InFlightOp(comm_id=77, age_ns=12 * 10**9, **SEND))
    ranks.append(rank_progress(0, 3))
    _, line, _ = judge(ranks)
    assert line.startswith('HANG: rank 1 in send (group "pp" (ranks 1-2), p2p) for '), line


TP = [(AR, 512 << 10), (AR, 512 << 10)]


def test_an_overlapped_rank_that_skipped_an_all_reduce_is_named_though_it_is_behind():
    # Megatron, TP=2: async all-reduces overlapped. Rank 1 skipped the 4-byte
    # one at seq 3; its next op (512 KiB) met rank 0's 4 B there, and rank 0
    # launched one op more. The rank behind is the one that skipped.
    rank0 = TP + [(AR, 4), (AR, 512 << 10)]
    rank1 = TP + [(AR, 512 << 10)]
    findings, line, doc = judge([rank(0, 2, rank0, completed=2, in_flight=3),
                                 rank(1, 2, rank1, completed=2, in_flight=3)])
    assert ("the ranks diverged at seq 3: rank 0 all_reduce 4 B (float32, sum), rank 1 all_reduce 512 KiB "
            "(float32, sum): rank 1 skipped all_reduce 4 B (float32, sum) (its ops from seq 3 are rank 0's "
            "1 seq later)") in line
    assert "ahead" not in line and "cannot tell" not in line
    assert doc["culprits"] == [1]
    [group] = doc["mismatch"]["groups"]
    assert group["skips"] == [{"ranks": [1], "seq": 3, "skipped": "all_reduce 4 B (float32, sum)",
                               "evidence": "its ops from seq 3 are rank 0's 1 seq later"}]
    assert group["culprit_note"] == "rank 1 skipped all_reduce 4 B (float32, sum) at seq 3"


def test_a_rank_whose_op_belongs_to_the_next_step_skipped_the_rest_of_the_step():
    # DeepSpeed on gloo: rank 1 skipped the logging all_reduce that ends step
    # 5 and blocked in step 6's first all_gather; neither side could run on.
    gather = ("ncclAllGather", 7, -1, -1)
    rank0 = [(gather, 4096, 4), (AR, 4096, 4), (AR, 4, 4)]
    rank1 = [(gather, 4096, 4), (AR, 4096, 4), (gather, 4096, 5)]
    findings, line, doc = judge([rank(0, 2, rank0, completed=2), rank(1, 2, rank1, completed=2)])
    assert ("rank 1 skipped the rest of step 5 from all_reduce 4 B (float32, sum) (its op at seq 3 started "
            "in step 6, rank 0's in step 5)") in line
    assert doc["culprits"] == [1] and "cannot tell" not in line


def test_evidence_both_ways_names_no_one():
    # The same two ops alternating, one rank a seq off: each looks like the
    # other's skip. No call is made; the tie is said as before.
    a, b = (AR, 1024), (AR, 2048)
    findings, line, doc = judge([rank(0, 2, [a, b, a, b], completed=0, in_flight=1),
                                 rank(1, 2, [b, a, b, a], completed=0, in_flight=1)])
    assert "skipped" not in line and "the seqs alone cannot tell" in line
    assert doc["mismatch"]["groups"][0]["skips"] == []


def test_the_same_steps_and_no_shift_make_no_skip_claim():
    findings, line, doc = judge([rank(0, 2, TP + [(AR, 4, 7)], completed=2),
                                 rank(1, 2, TP + [(AR, 8, 7)], completed=2)])
    assert "skipped" not in line and doc["culprits"] == []


def stage(r, ops, *, completed, in_flight):
    """A pipeline stage of a 2-rank group (comm rank = r): p2p ops
    (name, bytes, peer, nth), seq 1.., in flight in seq ``in_flight``."""
    p = pb.RankProgress(rank=r, world_size=2, pid=100 + r, alive=True, last_op=ops[-1][0])
    comm = p.comms.add(comm_id=55, last_started_seq=len(ops), last_completed_seq=completed, comm_size=2,
                       lane=pb.OP_KIND_P2P, group_name="PIPELINE_MODEL_PARALLEL_GROUP", comm_rank=r)
    comm.recent.first_seq = 1
    comm.recent.ops.extend(pb.Fingerprint(name=n, bytes=b, dtype=7, reduce_op=-1, peer=peer, nth=k)
                           for n, b, peer, k in ops)
    name, nbytes = ops[in_flight - 1][:2]
    p.oldest_in_flight.CopyFrom(pb.InFlightOp(name=name, kind=pb.OP_KIND_P2P, comm_id=55, seq=in_flight,
                                              age_ns=int(12e9), bytes=nbytes))
    return p


def test_two_stages_sending_to_each_other_are_not_a_divergence():
    # 1F1B: both stages send, then receive, in one batch; by seq they "ran
    # different ops" (rank 0 send to 1, rank 1 send to 0), which is no mismatch.
    kib = 512 << 10
    s0 = [("ncclSend", kib, 1, 1), ("ncclRecv", kib, 1, 1), ("ncclSend", kib, 1, 2), ("ncclRecv", kib, 1, 2)]
    s1 = [("ncclRecv", kib, 0, 1), ("ncclSend", kib, 0, 1), ("ncclSend", kib, 0, 2), ("ncclRecv", kib, 0, 2)]
    findings, line, doc = judge([stage(0, s0, completed=2, in_flight=3), stage(1, s1, completed=2, in_flight=3)])
    assert line.startswith("HANG: ") and "diverged" not in line and "pair" not in line and "ahead" not in line
    assert doc["mismatch"] is None and doc["culprits"] == []


def test_a_send_whose_recv_differs_is_said_by_pair():
    s0 = [("ncclSend", 4096, 1, 1), ("ncclSend", 8192, 1, 2)]
    s1 = [("ncclRecv", 4096, 0, 1), ("ncclRecv", 2048, 0, 2)]
    findings, line, doc = judge([stage(0, s0, completed=1, in_flight=2), stage(1, s1, completed=1, in_flight=2)])
    assert ("the p2p ops do not pair: rank 0's send #2 to rank 1 (8 KiB float32) met rank 1's recv #2 "
            "from rank 0 (2 KiB float32)") in line
    [group] = doc["mismatch"]["groups"]
    assert group["unpaired"] and doc["culprits"] == [] and "either side" in group["culprit_note"]


def test_the_culprit_is_placed_in_the_parallel_layout():
    ranks = [rank(0, 2, TP + [(AR, 4), (AR, 512 << 10)], completed=2, in_flight=3),
             rank(1, 2, TP + [(AR, 512 << 10)], completed=2, in_flight=3)]
    ranks[1].parallel_coords = "tp 1, pp 0, dp 0"
    ranks[0].parallel_coords = "tp 0, pp 0, dp 0"
    findings, line, doc = judge(ranks)
    assert doc["verdict"].count("rank 1 is tp 1, pp 0, dp 0;") == 1 and "rank 0 is" not in doc["verdict"]


def test_a_sync_skip_is_named_by_the_steps_repeating_pattern():
    # DeepSpeed ZeRO-3 on gloo: each step runs [all_reduce 4 B (the logged
    # loss), all_gather, reduce_scatter, all_reduce 8 B]. Rank 1 skipped the
    # logged loss; both block at once (sync ops): no one ran on, and the
    # shift shows nothing. The pattern does: rank 1's op is the one each step
    # runs a seq later.
    gather, rs = ("ncclAllGather", 7, -1, -1), ("ncclReduceScatter", 7, 0, -1)
    setup = [(AR, 64), (gather, 128), (AR, 16)]            # the first steps differ: set-up
    step = [(AR, 4), (gather, 4096), (rs, 8192), (AR, 8)]
    history = setup + step * 3
    findings, line, doc = judge([rank(0, 2, history + [(AR, 4)], completed=len(history)),
                                 rank(1, 2, history + [(gather, 4096)], completed=len(history))])
    assert ("rank 1 skipped all_reduce 4 B (float32, sum) (its op at seq 16 is the one each step runs 1 seq "
            "later; the ops repeat every 4)") in line
    assert doc["culprits"] == [1]


def test_a_rank_that_follows_the_pattern_is_never_said_to_skip():
    # Both ranks' ops at the seq differ from the pattern: no claim.
    step = [(AR, 4), (AR, 4096), (AR, 8)]
    history = step * 3
    findings, line, doc = judge([rank(0, 2, history + [(AR, 16)], completed=len(history)),
                                 rank(1, 2, history + [(AR, 32)], completed=len(history))])
    assert "skipped" not in line and doc["culprits"] == []


def test_a_cycle_with_no_earlier_steps_names_no_one_and_never_the_rank_stuck_first():
    # Megatron TP=2 x PP=2, one tensor-parallel all-reduce skipped on rank 1:
    # rank 0 waits in it (seq 5 of TP {0,1}); rank 1 ran on into the
    # distributed optimizer's all-reduce (seq 9 of a group of all four), where
    # ranks 1-3 wait for rank 0. Rank 0 was stuck first, 0.1 s before: that
    # proves nothing (two runs of one job enter in either order), and without
    # windows no earlier step shows the order: no one is named.
    def progress(r, op_comm, op_seq, age_s, tp_started, do_started):
        p = pb.RankProgress(rank=r, world_size=4, pid=100 + r, alive=True, last_op="ncclAllReduce")
        if r in (0, 1):
            p.comms.add(comm_id=11, last_started_seq=tp_started, last_completed_seq=4, comm_size=2,
                        lane=pb.OP_KIND_COLLECTIVE, group_name="TENSOR_MODEL_PARALLEL_GROUP", comm_rank=r)
        p.comms.add(comm_id=12, last_started_seq=do_started, last_completed_seq=8, comm_size=4,
                    lane=pb.OP_KIND_COLLECTIVE, group_name="DISTRIBUTED_OPTIMIZER", comm_rank=r)
        p.oldest_in_flight.CopyFrom(pb.InFlightOp(name="ncclAllReduce", kind=pb.OP_KIND_COLLECTIVE,
                                                  comm_id=op_comm, seq=op_seq, age_ns=int(age_s * 1e9)))
        return p
    ranks = [progress(0, 11, 5, 20.3, 5, 8), progress(1, 12, 9, 20.2, 4, 9),
             progress(2, 12, 9, 20.2, 0, 9), progress(3, 12, 9, 20.2, 0, 9)]
    findings, line, doc = judge(ranks)
    assert doc["culprits"] == [], line
    # (no activity in these reports: not proven blocked, the cycle is what the waits look like)
    assert ('waits in a cycle, not every rank blocked (some compute): ranks 1-3 in "DISTRIBUTED_OPTIMIZER" '
            'wait for rank 0, rank 0 in "TENSOR_MODEL_PARALLEL_GROUP" wait for rank 1') in line
    assert "no earlier steps show the order of their groups' ops: no one is named" in line
    assert "never entered" not in line and doc["deadlock"]["ranks"] == [0, 1, 2, 3]


def test_a_rank_waiting_for_a_stalled_rank_in_another_group_is_not_named():
    # torchtitan TP=2 x DP=2, rank 3 stalled in its data loader: rank 1 waits
    # for it in the batch group {1,3}'s token-count all-reduce (seq 9), ranks
    # 0 and 2 in their TP groups' reduce-scatter (seq 551), rank 0 for rank 1,
    # rank 2 for rank 3. All began within milliseconds: the ages cannot order
    # them. Rank 1 only waits: the waits end at rank 3, in no collective.
    tp01, tp23, b02, b13 = 21, 22, 23, 24

    def progress(r, in_op, lanes):
        p = pb.RankProgress(rank=r, world_size=4, pid=100 + r, alive=True, last_op="reduce_scatter_tensor")
        for comm_id, name, started in lanes:
            p.comms.add(comm_id=comm_id, last_started_seq=started, last_completed_seq=started - 1, comm_size=2,
                        lane=pb.OP_KIND_COLLECTIVE, group_name=name, comm_rank=r % 2)
        if in_op is not None:
            name, comm_id, seq = in_op
            p.oldest_in_flight.CopyFrom(pb.InFlightOp(name=name, kind=pb.OP_KIND_COLLECTIVE, comm_id=comm_id,
                                                      seq=seq, age_ns=int(20.0e9)))
        return p
    ranks = [progress(0, ("reduce_scatter_tensor", tp01, 551), [(tp01, "mesh_tp", 551), (b02, "mesh_batch", 9)]),
             progress(1, ("all_reduce", b13, 9), [(tp01, "mesh_tp", 550), (b13, "mesh_batch", 9)]),
             progress(2, ("reduce_scatter_tensor", tp23, 551), [(tp23, "mesh_tp", 551), (b02, "mesh_batch", 9)]),
             progress(3, None, [(tp23, "mesh_tp", 550), (b13, "mesh_batch", 8)])]
    findings, line, doc = judge(ranks)
    assert doc["culprits"] == [3], line
    assert "rank 1 never entered" not in line and "rank 1 in all_reduce" in line, line


def cycle(times: bool):
    """Megatron TP=2 x PP=2 after a TP all-reduce skipped on rank 1, as the
    device showed it: rank 0 in TP seq 8, rank 1 in the distributed
    optimizer's seq 3 with ranks 2-3, all since the same moment. Each step
    (100 ms) runs 3 TP all-reduces (at 10, 20, 30 ms) then the optimizer's
    (60 ms); ``times``: the windows say when each op started."""

    def progress(r, in_comm, in_seq, tp, do):
        p = pb.RankProgress(rank=r, world_size=4, pid=100 + r, alive=True, last_op="ncclAllReduce")
        for comm_id, name, ops, size in ((11, "TENSOR_MODEL_PARALLEL_GROUP", tp, 2),
                                         (12, "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP", do, 4)):
            if ops is None:
                continue
            c = p.comms.add(comm_id=comm_id, last_started_seq=len(ops), last_completed_seq=len(ops) - 1,
                            comm_size=size, lane=pb.OP_KIND_COLLECTIVE, group_name=name, comm_rank=r % size)
            c.recent.first_seq = 1
            c.recent.ops.extend(pb.Fingerprint(name="ncclAllReduce", bytes=b, dtype=7, reduce_op=0, peer=-1)
                                for b, _, _ in ops)
            c.recent_steps.step.extend(step for _, step, _ in ops)
            c.recent_steps.into_step_ns.extend(at * 1_000_000 for _, _, at in ops)
            if times:
                c.recent_steps.start_ns.extend((step * 100 + at) * 1_000_000 for _, step, at in ops)
        p.oldest_in_flight.CopyFrom(pb.InFlightOp(name="ncclAllReduce", kind=pb.OP_KIND_COLLECTIVE,
                                                  comm_id=in_comm, seq=in_seq, age_ns=int(20.234e9)))
        return p
    tp_step = [(256 << 10, s, at) for s in (1, 2) for at in (10, 20, 30)]
    do = [(4, 1, 60), (4, 2, 60)]
    ranks = [progress(0, 11, 8, tp_step + [(256 << 10, 3, 10), (256 << 10, 3, 20)], do),  # in its 2nd TP op of step 3
             progress(1, 12, 3, tp_step + [(256 << 10, 3, 20)], do + [(4, 3, 58)]),      # one TP op, then the optimizer
             progress(2, 12, 3, None, do + [(4, 3, 50)]), progress(3, 12, 3, None, do + [(4, 3, 50)])]
    return judge(ranks)


def test_of_two_ranks_waiting_for_each_other_the_one_that_ran_past_the_earlier_op_is_named():
    findings, line, doc = cycle(times=True)
    assert doc["culprits"] == [1], line
    assert "rank 1 never entered ncclAllReduce (group \"TENSOR_MODEL_PARALLEL_GROUP\", seq 8)" in line
    assert ('rank 1 broke the order of its earlier steps (ran ncclAllReduce on '
            '"INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP" where its earlier steps run ncclAllReduce on '
            '"TENSOR_MODEL_PARALLEL_GROUP")') in line
    assert "rank 0 never entered" not in line
    assert doc["deadlock"]["order"][0]["ops_per_step"] == 4


def test_without_the_order_of_earlier_steps_no_rank_of_the_cycle_is_named():
    findings, line, doc = cycle(times=False)
    assert doc["culprits"] == [], line
    assert "no one is named" in line and "never entered" not in line
