"""The stalled rule's pass is read by the rules after it (stalled.Aged: the
ops past the wait, who is alive and in flight) and, in ``decide``, filtered
for the timeout after the probe's shorter wait: the same findings as each
rule reading every rank itself, whatever the mix of ranks."""

import random

from diag.hang import decide
from diag.hang.api import Limits
from diag.hang.stalled import StalledRule
from diag.pb import collector_pb2 as pb
from tests.hang.views import AR, NOW, progress, view

OTHER = dict(name="all_gather", kind=pb.OP_KIND_COLLECTIVE)
NODES, PER_NODE = 6, 4


def _random_view(rng: random.Random):
    world = NODES * PER_NODE
    ranks = {}
    for rank in range(world):
        roll = rng.random()
        if roll < 0.1:     # exited
            ranks[rank] = progress(rank, started=4, alive=False, world=world, idle_s=rng.uniform(0, 30))
        elif roll < 0.35:  # behind: never entered seq 5, nothing in flight
            ranks[rank] = progress(rank, started=4, completed=4, world=world, idle_s=rng.uniform(0, 30),
                                   last_op=rng.choice(("all_reduce", "broadcast", "")))
        elif roll < 0.45:  # in flight in another group's op, maybe since before the others
            ranks[rank] = progress(rank, op=OTHER, comm_id=1, seq=3, age_s=rng.uniform(0, 40), started=4,
                                   completed=4, world=world)
            ranks[rank].comms.add(comm_id=1, last_started_seq=3, last_completed_seq=2, comm_size=world,
                                  lane=pb.OP_KIND_COLLECTIVE)
        else:              # in the default group's all_reduce at seq 5, some past the probe's wait, some past the timeout
            ranks[rank] = progress(rank, op=AR, seq=5, age_s=rng.choice((1.0, 7.0, 12.0, rng.uniform(0, 20))),
                                   started=5, completed=4, world=world)
    nodes = {r: r // PER_NODE for r in ranks}
    seen = {n: NOW - (20.0 if rng.random() < 0.15 else 0.5) for n in range(NODES)}   # some agents silent
    return view(ranks, world=world, nodes=nodes, seen=seen)


def test_the_rules_read_the_stalled_pass_as_they_read_every_rank(monkeypatch):
    views = [_random_view(random.Random(seed)) for seed in range(60)]
    limits = [Limits(10.0, 5.0, proofs=proofs) for proofs in (False, True)]
    shared = [decide.decide(v, lim) for v in views for lim in limits]
    analysed = [decide.analyse(v, lim) for v in views for lim in limits]
    judge = StalledRule.judge

    def each_reads_itself(self, case):
        found = judge(self, case)
        case.aged = None   # the rules after it read every rank, and decide's second pass too
        return found

    monkeypatch.setattr(StalledRule, "judge", each_reads_itself)
    assert shared == [decide.decide(v, lim) for v in views for lim in limits]
    assert analysed == [decide.analyse(v, lim) for v in views for lim in limits]
    assert sum(bool(f.hung) for f in shared) > 60 and sum(bool(f.never_entered) for f in shared) > 20
    assert sum(any(s.reason == "exited" for s in f.suspects) for f in shared) > 20
