"""The deadlock rule (diag/hang/deadlock.py) and the order evidence it names
the culprit by (diag/hang/order.py), fed plain data: each rank's lanes with
when each op started, its op in flight and how quiet its process tree is."""

from diag.hang import decide, order
from diag.hang.api import Limits
from diag.pb import collector_pb2 as pb
from tests.hang.views import view

DEFAULT, STATS, TENSOR = 0, 7, 9
NAMES = {DEFAULT: "default", STATS: "stats", TENSOR: "tensor"}
MS = 1_000_000


def rank(r, world, lanes, in_comm, *, age_s=6.0, idle_s=None, quiet_s=None, first_seq=1):
    """``lanes``: comm id -> the ms each of its ops started (seqs from
    ``first_seq``); the rank is in flight in the last op of ``in_comm`` since
    ``age_s``, idle (no op started or ended) and quiet (no CPU or I/O) as long
    unless told."""
    p = pb.RankProgress(rank=r, world_size=world, pid=100 + r, alive=True, last_op="all_reduce",
                        idle_ns=int((age_s if idle_s is None else idle_s) * 1e9))
    p.activity.quiet_ns = int((age_s if quiet_s is None else quiet_s) * 1e9)
    for comm_id, starts in lanes.items():
        last = first_seq + len(starts) - 1
        c = p.comms.add(comm_id=comm_id, last_started_seq=last, last_completed_seq=last - (comm_id == in_comm),
                        comm_size=world, lane=pb.OP_KIND_COLLECTIVE, group_name=NAMES[comm_id], comm_rank=r)
        c.recent.first_seq = first_seq
        c.recent.ops.extend(pb.Fingerprint(name="all_reduce", bytes=4, dtype=7, reduce_op=0, peer=-1)
                            for _ in starts)
        c.recent_steps.step.extend(0 for _ in starts)
        c.recent_steps.into_step_ns.extend(0 for _ in starts)
        c.recent_steps.start_ns.extend(t * MS for t in starts)
    seq = first_seq + len(lanes[in_comm]) - 1
    p.oldest_in_flight.CopyFrom(pb.InFlightOp(name="all_reduce", kind=pb.OP_KIND_COLLECTIVE, comm_id=in_comm,
                                              seq=seq, age_ns=int(age_s * 1e9), comm_size=world))
    return p


def steps(n, *at):
    """The start times of ``n`` steps of 100 ms, at ``at`` ms into each."""
    return [100 * k + a for k in range(n) for a in at]


def skipped_world_all_reduce(world=3, culprit=1, kw=None):
    """Step 10: ``culprit`` skipped the world all-reduce and waits in "stats";
    the others wait in the world one. ``kw``: rank -> its rank() options."""
    kw = kw or {}
    ranks = {}
    for r in range(world):
        if r == culprit:
            ranks[r] = rank(r, world, {DEFAULT: steps(9, 10), STATS: steps(10, 60)}, STATS, **kw.get(r, {}))
        else:
            ranks[r] = rank(r, world, {DEFAULT: steps(10, 10), STATS: steps(9, 60)}, DEFAULT, **kw.get(r, {}))
    return ranks


def judged(ranks, probe_s=5.0):
    """The probe's findings (the rules with the verdict rules' wait) and the
    verdict on them, as diag/hang/decide.decide makes them."""
    found = decide.analyse(view(ranks), Limits(probe_s, 60.0))
    return found, decide.decide(view(ranks), Limits(300.0, 60.0))


def test_a_collective_skipped_on_one_group_while_the_job_went_on_in_another_is_a_deadlock_named_by_evidence():
    found, verdict = judged(skipped_world_all_reduce())
    d = found.deadlock
    assert d is not None and d.blocked and d.ranks == [0, 1, 2]
    assert {(w.op.comm_id, w.ranks, w.waits_for) for w in d.waits} == {(DEFAULT, (0, 2), (1,)), (STATS, (1,), (0, 2))}
    assert found.culprits == [1] and d.culprits == (1,)
    broke = d.broke[1]
    assert (broke.actual, broke.expected, broke.period) == ((STATS, "all_reduce"), (DEFAULT, "all_reduce"), 2)
    assert verdict.rule == "deadlock" and verdict.hung, verdict.fired   # before the 300 s timeout
    assert [n.rank for n in found.never_entered] == [1]


def test_the_culprit_is_the_rank_that_broke_the_order_whichever_rank_and_whichever_group():
    for culprit in range(3):
        found, _ = judged(skipped_world_all_reduce(culprit=culprit))
        assert found.culprits == [culprit], culprit
    # the skip on "stats": the culprit ran on into the next step's world all-reduce
    ranks = {0: rank(0, 3, {DEFAULT: steps(10, 10), STATS: steps(10, 60)}, STATS),
             1: rank(1, 3, {DEFAULT: steps(11, 10), STATS: steps(9, 60)}, DEFAULT),
             2: rank(2, 3, {DEFAULT: steps(10, 10), STATS: steps(10, 60)}, STATS)}
    found, verdict = judged(ranks)
    assert found.culprits == [1] and verdict.rule == "deadlock"


def test_an_extra_collective_is_named_as_a_skipped_one_is():
    # rank 1 ran a second "stats" all-reduce in step 10; the others went on to step 11's world one
    extra = steps(10, 60) + [1000]
    ranks = {0: rank(0, 3, {DEFAULT: steps(11, 10), STATS: steps(10, 60)}, DEFAULT),
             1: rank(1, 3, {DEFAULT: steps(10, 10), STATS: extra}, STATS),
             2: rank(2, 3, {DEFAULT: steps(11, 10), STATS: steps(10, 60)}, DEFAULT)}
    found, _ = judged(ranks)
    assert found.culprits == [1], found.deadlock


def test_three_groups_and_steps_that_run_one_group_twice():
    # each step: tensor, default, tensor, stats; rank 2 skipped the second tensor op of step 8
    # and went on to "stats"
    def lanes(tensor_ops, default_ops, stats_ops):
        return {TENSOR: steps(8, 5, 40)[:tensor_ops], DEFAULT: steps(8, 20)[:default_ops],
                STATS: steps(8, 70)[:stats_ops]}
    ranks = {0: rank(0, 3, lanes(16, 8, 7), TENSOR), 1: rank(1, 3, lanes(16, 8, 7), TENSOR),
             2: rank(2, 3, lanes(15, 8, 8), STATS)}
    found, verdict = judged(ranks)
    assert found.culprits == [2] and verdict.rule == "deadlock", found.deadlock
    assert found.deadlock.broke[2].period == 4


def test_a_skip_in_the_first_step_is_a_deadlock_that_names_no_one():
    ranks = {0: rank(0, 3, {DEFAULT: [10]}, DEFAULT), 1: rank(1, 3, {STATS: [60]}, STATS),
             2: rank(2, 3, {DEFAULT: [10]}, DEFAULT)}
    found, verdict = judged(ranks)
    assert found.deadlock is not None and verdict.rule == "deadlock"
    assert found.culprits == [] and found.never_entered == ()
    assert "no earlier steps show the order" in found.deadlock.undecided


def test_a_rank_that_computes_with_an_async_op_out_is_not_blocked_and_nothing_is_proven():
    # rank 1 started the world all-reduce async and computes (its tree uses CPU): its waits may still end
    found, verdict = judged(skipped_world_all_reduce(kw={1: dict(quiet_s=0.3)}))
    assert found.deadlock is not None and not found.deadlock.blocked
    assert not verdict.hung, verdict.fired
    # nor one that started an op a moment ago (not idle since it entered its own)
    found, verdict = judged(skipped_world_all_reduce(kw={0: dict(idle_s=0.5)}))
    assert not found.deadlock.blocked and not verdict.hung


def test_no_deadlock_where_a_waited_for_rank_is_in_no_collective_or_every_member_is_there():
    ranks = skipped_world_all_reduce()
    ranks[1].ClearField("oldest_in_flight")   # rank 1 is in user code: the stall rules' case
    found, verdict = judged(ranks)
    assert found.deadlock is None and verdict.rule != "deadlock"
    # every member in the same op: stuck for another reason (a link, a GPU), not a cycle
    same = {r: rank(r, 3, {DEFAULT: steps(10, 10), STATS: steps(9, 60)}, DEFAULT) for r in range(3)}
    found, _ = judged(same)
    assert found.deadlock is None


def test_a_member_on_a_silent_agent_proves_nothing():
    ranks = skipped_world_all_reduce()
    v = view(ranks, nodes={1: 1}, seen={0: 1000.0, 1: 990.0})
    found = decide.analyse(v, Limits(5.0, 5.0))
    assert found.deadlock is None


def test_the_order_of_a_lane_that_kept_only_its_last_ops_bounds_the_merge():
    # "default" runs 4 ops a step and kept its last 64 (from seq 37); "stats" kept all of its
    # 25. Before default's window the merge would read a step of "stats" ops alone.
    default = [100 * k + a for k in range(9, 25) for a in (1, 2, 3, 4)]
    stats = steps(25, 60)
    p = rank(0, 2, {DEFAULT: default, STATS: stats}, STATS)
    p.comms[0].recent.first_seq = 37
    ops = order.history(p)
    assert ops[0][0] >= 901 * MS and len(ops) == 64 + 16
    assert order.judge(p, STATS, 25).verdict == order.KEPT


def test_the_period_is_the_whole_tail_not_its_last_two_ops():
    d, s = (0, "all_reduce"), (1, "all_reduce")
    assert order._period([d, d, s] * 3 + [d, d]) == 3      # not 1, though the last two agree
    assert order._period([s, d, d] + [d, s] * 3) == 2      # set-up ops before the pattern
    assert order._period([d, s, d]) == 0                   # one step is no pattern
    assert order._period([]) == 0


def test_a_cycle_of_a_thousand_ranks_reads_a_sample_of_the_large_waits_and_still_names_the_culprit():
    # 1,000 ranks wait in the world all-reduce for rank 1, which skipped it and waits in "stats"
    world = 1_001
    ranks = skipped_world_all_reduce(world=world, culprit=1)
    calls = []
    real = order.judge
    order.judge = lambda *a, **k: calls.append(a[1:3]) or real(*a, **k)
    try:
        found, verdict = judged(ranks)
    finally:
        order.judge = real
    assert found.culprits == [1] and verdict.rule == "deadlock"
    # each of the two evaluations (the probe's findings, the verdict) reads 32 of the 1,000 waiters
    # and the culprit's wait whole
    assert len(calls) == 2 * (32 + 1), len(calls)
