"""``decide`` (diag/hang/decide.py) on plain data: each verdict rule proves a
hang before --hang-timeout only with its evidence, held its wait; anything
else waits for the timeout."""

from diag.hang import decide
from diag.hang.api import Limits
from diag.pb import collector_pb2 as pb
from tests.hang.test_divergence import BUCKET, LOSS, SMALL, member
from tests.hang.views import AR, progress, view

TIMEOUT, SILENT = 300.0, 60.0


def _judge(v, proofs=True):
    return decide.decide(v, Limits(TIMEOUT, SILENT, proofs=proofs))


def _quiet(p, quiet_s, **kw):
    p.activity.CopyFrom(pb.RankActivity(cpu_ns=1, io_bytes=1, procs=1, quiet_ns=int(quiet_s * 1e9), **kw))
    return p


def _waiting_for_rank_1(age_s, rank1):
    """Rank 0 in the default group's all_reduce at seq 5 for ``age_s``; rank 1 not in it."""
    return view({0: progress(0, op=AR, age_s=age_s, seq=5, started=5, completed=4, world=2), 1: rank1}, world=2)


def _idle(quiet_s=None, **kw):
    p = progress(1, started=4, completed=4, world=2, **kw)
    return p if quiet_s is None else _quiet(p, quiet_s)


def test_a_rank_with_no_activity_while_the_others_wait_is_blocked_at_30_s_not_before():
    assert not _judge(_waiting_for_rank_1(29.0, _idle(29.0))).hung
    found = _judge(_waiting_for_rank_1(31.0, _idle(31.0)))
    assert found.hung and found.rule == "blocked" and found.culprits == [1]
    assert found.fired[0].evidence == "rank 1 waited for: no CPU, I/O or kernel launch for 31 s"


def test_a_busy_or_unknown_or_named_rank_waits_for_the_timeout():
    busy = _idle(2.0)                                  # its tree used CPU or moved bytes 2 s ago
    unknown = _idle()                                  # no activity reported (older agent, /proc unreadable)
    named = _quiet(progress(1, op=dict(name="save_checkpoint", kind=pb.OP_KIND_HOST_FUNC), age_s=200.0,
                            started=4, completed=4, world=2), 200.0)   # in a host function the user named
    for rank1 in (busy, unknown, named):
        assert not _judge(_waiting_for_rank_1(200.0, rank1)).hung, rank1
        found = _judge(_waiting_for_rank_1(301.0, rank1))
        assert found.hung and found.rule == "timeout"
        assert found.fired[0].evidence == "in flight past --hang-timeout 300 s"


def test_a_member_that_exited_before_the_op_proves_the_hang_at_5_s():
    gone = progress(1, started=4, completed=4, world=2, alive=False)
    assert not _judge(_waiting_for_rank_1(4.0, gone)).hung
    found = _judge(_waiting_for_rank_1(6.0, gone))
    assert found.rule == "exited" and found.culprits == [1]
    # one that had started the op the others wait in is no proof
    done = progress(1, started=5, completed=5, world=2, alive=False)
    assert not _judge(_waiting_for_rank_1(6.0, done)).hung


def test_a_fatal_gpu_error_on_a_waiting_or_awaited_rank_proves_the_hang_at_5_s():
    for faulty in (0, 1):      # the rank that waits, or the one it waits for
        v = _waiting_for_rank_1(6.0, _idle(2.0))
        gpu = v.ranks[faulty].progress.gpu
        gpu.identity.pci_bus_id = "0000:1b:00.0"
        gpu.events.add(kind="xid", code=79, text="GPU has fallen off the bus", fatal=True)
        found = _judge(v)
        assert found.rule == "gpu_fault" and found.culprits == [1], found
        assert found.fired[0].evidence == (f"rank {faulty}'s GPU 0000:1b:00.0 reported XID 79: "
                                           "GPU has fallen off the bus")
    # an event that is no hardware fault (an application's XID 13) is no proof
    v = _waiting_for_rank_1(6.0, _idle(2.0))
    v.ranks[1].progress.gpu.events.add(kind="xid", code=13, text="graphics engine exception", fatal=False)
    assert not _judge(v).hung


def test_ranks_that_diverged_are_proven_hung_at_5_s():
    ranks = {0: member(0, [BUCKET, SMALL, LOSS], 2), 1: member(1, [BUCKET, SMALL] * 3, 2)}
    for p in ranks.values():
        p.oldest_in_flight.age_ns = 6_000_000_000
    found = _judge(view(ranks))
    assert found.rule == "diverged" and found.culprits == [1]
    assert found.fired[0].evidence.startswith("group default diverged at seq 3 (rank 1)")
    for p in ranks.values():
        p.oldest_in_flight.age_ns = 4_000_000_000
    assert not _judge(view(ranks)).hung


def test_members_that_agree_are_no_proof_and_verdicts_timeout_waits_for_it():
    ranks = {r: member(r, [BUCKET, SMALL, LOSS], 2) for r in (0, 1)}
    for p in ranks.values():
        p.oldest_in_flight.age_ns = 100_000_000_000
    assert not _judge(view(ranks)).hung
    # --verdicts timeout: no evidence rule, even where one would prove it
    assert not _judge(_waiting_for_rank_1(31.0, _idle(31.0)), proofs=False).hung
    assert _judge(_waiting_for_rank_1(301.0, _idle(31.0)), proofs=False).rule == "timeout"


def test_a_link_frozen_while_every_other_channel_advanced_proves_the_hang_at_5_s():
    from diag.link import wire
    from tests.link.test_analysis import stuck_ring

    links = stuck_ring(4, 1, src=1, step=3)
    ranks = {}
    for r in range(4):
        p = progress(r, op=AR, age_s=6.0, seq=4, started=4, completed=3, world=4)
        p.links.extend(wire.entry_msg(e) for e in links.get(r, []))
        ranks[r] = p
    found = _judge(view(ranks, nodes={0: 0, 1: 0, 2: 1, 3: 1}))
    assert found.rule == "frozen_link", found.fired
    assert found.fired[0].evidence == "link rank 1 -> rank 2 stuck at step 3 while every other channel advanced"
    for p in ranks.values():       # without the plugin's counters: the timeout judges it
        del p.links[:]
    assert not _judge(view(ranks, nodes={0: 0, 1: 0, 2: 1, 3: 1})).hung


def test_each_rule_states_its_name_evidence_and_wait():
    limits = Limits(TIMEOUT, SILENT, proof_s=5.0, blocked_s=30.0)
    assert [(p.name, p.wait_s(limits)) for p in decide.PROOFS] == [
        ("diverged", 5.0), ("deadlock", 5.0), ("exited", 5.0), ("frozen_link", 5.0), ("gpu_fault", 5.0), ("blocked", 30.0),
        ("stuck_kernel", 5.0)]
    assert all(p.evidence and p.decides for p in decide.PROOFS)
    assert set(decide.VERDICT_RULES) == {p.name for p in decide.PROOFS} | {"timeout"}
