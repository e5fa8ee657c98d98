"""Plain data for the hang rules: the read-only view (diag/hang/api.View)
as named tuples around RankProgress messages, no collector state."""

from typing import NamedTuple

from diag.hang.api import Case, Findings, Limits
from diag.pb import collector_pb2 as pb

NOW = 1000.0
AR = dict(name="all_reduce", kind=pb.OP_KIND_COLLECTIVE)


class Entry(NamedTuple):
    progress: pb.RankProgress
    received: float
    node_rank: int = 0


class Agent(NamedTuple):
    hostname: str
    ranks: tuple
    last_seen: float


class View(NamedTuple):
    now: float
    world_size: int
    ranks: dict
    agents: dict


def progress(rank, *, op=None, age_s=0.0, comm_id=0, seq=0, started=None, completed=None, idle_s=0.0,
             alive=True, pid=None, last_op="all_reduce", world=4):
    """A rank's report: in flight in ``op`` (dict(name=, kind=)) at ``seq`` for
    ``age_s``; ``started``/``completed``: its collective lane of ``comm_id``."""
    p = pb.RankProgress(rank=rank, world_size=world, pid=pid or 100 + rank, alive=alive, last_op=last_op,
                        idle_ns=int(idle_s * 1e9))
    if op is not None:
        p.oldest_in_flight.CopyFrom(pb.InFlightOp(comm_id=comm_id, seq=seq, age_ns=int(age_s * 1e9), **op))
    if started is not None:
        p.comms.add(comm_id=comm_id, last_started_seq=started,
                    last_completed_seq=completed if completed is not None else started, comm_size=world,
                    lane=pb.OP_KIND_COLLECTIVE)
    return p


def view(ranks, *, now=NOW, world=None, nodes=None, seen=None):
    """``ranks``: RankProgress by rank, reported at ``now``, all on node 0
    (``nodes``: rank -> node); ``seen``: node -> when its agent last reported."""
    nodes = nodes or {}
    entries = {r: Entry(p, now, nodes.get(r, 0)) for r, p in ranks.items()}
    agents = {}
    for r in sorted(entries):
        node = nodes.get(r, 0)
        host, have, last = agents.get(node, (f"n{node}", (), (seen or {}).get(node, now)))
        agents[node] = Agent(host, have + (r,), last)
    return View(now, world if world is not None else len(ranks), entries, agents)


def case(v, *, timeout=10.0, silent_after=5.0, idle=60.0, findings=None):
    return Case(v, Limits(timeout, silent_after, idle), findings or Findings(world_size=v.world_size))
