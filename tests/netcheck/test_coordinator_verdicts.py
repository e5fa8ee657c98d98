"""The coordinator's verdicts from measured figures, without a network.

A store in memory stands in for the TCPStore: when the coordinator posts
``plan/<round>``, every live node's result for that round is already there,
with the busbw the script gives its pair. A node that is "gone" posts nothing
and its heartbeat never moves. Everything else (rounds, rules, pinning, the
final document) is the real coordinator's.
"""

from __future__ import annotations

import pytest

from diag.netcheck.config import Config, Measure, Rendezvous
from diag.netcheck.config import Thresholds as CfgThresholds
from diag.netcheck.coordinator import Coordinator
from diag.netcheck.report import Reporter


class Store:
    """The coordinator's side of the session: set_json/get_json/has/heartbeat_age."""

    def __init__(self, n, busbw, gone=(), failed=()):
        # Every node joined; a gone one died after its join, inside round 1.
        self.kv = {f"join/{u}": {"name": f"node{u}", "host_rank": u, "addr": f"10.0.0.{u}"} for u in range(n)}
        self.n, self.busbw, self.gone, self.failed = n, busbw, set(gone), dict(failed)
        self.plans = []

    def set_json(self, key, value):
        self.kv[key] = value
        if key.startswith("plan/") and not value["done"]:
            rnd = value["round"]
            self.plans.append([tuple(p) for p in value["pairs"]])
            for a, b in value["pairs"]:
                for u in (a, b):
                    if u not in self.gone:
                        self.kv[f"result/{rnd}/{u}"] = self._result(rnd, a, b, u)
        if key.startswith("plan/") and value["done"]:
            self.kv.update({f"done/{u}": True for u in range(self.n) if u not in self.gone})

    def _result(self, rnd, a, b, u):
        if (rnd, u) in self.failed:
            return {"ok": False, "rule": "error", "error": self.failed[(rnd, u)]}
        bw = self.busbw(rnd, a, b)
        fig = {"busbw": bw, "algbw": bw, "seconds": 1e-3 / bw, "bytes": 1 << 20}
        return {"ok": True, "tests": {"all_reduce": dict(fig), "sendrecv": dict(fig)}}

    def get_json(self, key):
        return self.kv[key]

    def has(self, key):
        return key in self.kv

    def heartbeat_age(self, unit):
        return 1e9 if unit in self.gone else 0.0


def run(n, busbw, gone=(), failed=(), rel_ratio=0.2):
    cfg = Config(rdzv=Rendezvous(nnodes=n, join_timeout=1.0),
                 measure=Measure(warmup=1, iters=3, timeout=1.0, deadline=60.0),
                 thresholds=CfgThresholds(profile="none", rel_ratio=rel_ratio))
    store = Store(n, busbw, gone, failed)
    doc = Coordinator(cfg, store, Reporter(False)).run()
    verdicts = {r["node"]: r["verdict"] for r in doc["records"] if r["metric"] == "node"}
    return doc, verdicts, store.plans


def faulty(doc):
    return {f["node"] for f in doc["faulty"]}


def test_partner_of_a_dead_node_is_not_named_when_its_lone_round_is_slowed_by_the_host():
    """Node 2 dies in round 1. Round 2 re-tests node 3 alone with node 0, in a moment the
    host is 6x busier: 0.06 GB/s against round 1's 0.4. Nothing measured beside it can
    tell node 3's slowness from the host's, so node 3 must not be named (it used to be:
    the relative rule compared it with round 1's pair)."""
    def busbw(rnd, a, b):
        return 0.4 if rnd == 1 else 0.06
    doc, verdicts, plans = run(4, busbw, gone={2}, failed={(1, 3): "round 1 with node rank 2: Connection reset"})
    assert plans == [[(0, 1), (2, 3)], [(3, 0)]]
    assert faulty(doc) == {"node2"}, doc["faulty"]
    assert verdicts["node3"] == "unknown" and verdicts["node0"] == verdicts["node1"] == "pass"
    why = next(r["reason"] for r in doc["records"] if r["metric"] == "node" and r["node"] == "node3")
    assert "measured alone in round 2" in why and "0.06" in why, why


def test_partner_of_a_dead_node_passes_when_its_lone_round_is_as_fast():
    doc, verdicts, _ = run(4, lambda rnd, a, b: 0.4 if rnd == 1 else 0.35, gone={2},
                           failed={(1, 3): "round 1 with node rank 2: Connection reset"})
    assert faulty(doc) == {"node2"}
    assert verdicts == {"node0": "pass", "node1": "pass", "node2": "fail", "node3": "pass"}


def test_round_two_judges_its_pairs_against_each_other_not_against_round_one():
    """Node 3 is slow (0.01 GB/s with anyone); round 2 runs its re-test beside node 2's,
    under a host 5x as busy as in round 1: node 3 is named, node 2 is not, though
    node 2's round-2 pair (0.15) is under 0.2 x round 1's median (0.8)."""
    def busbw(rnd, a, b):
        if 3 in (a, b):
            return 0.01
        return 0.8 if rnd == 1 else 0.15
    doc, verdicts, plans = run(8, busbw)
    assert plans == [[(0, 1), (2, 3), (4, 5), (6, 7)], [(2, 0), (3, 1)]]
    assert faulty(doc) == {"node3"}
    assert verdicts["node2"] == "pass" and set(verdicts.values()) == {"pass", "fail"}
    node3 = next(r for r in doc["records"] if r["metric"] == "node" and r["node"] == "node3")
    assert node3["rule"] == "pairing+relative-ratio" and node3["reason"].endswith(" is healthy")


def test_a_slow_node_measured_alone_is_still_named_beside_a_reference_pair():
    """Five nodes, node 4 slow and waiting in round 1: round 2 pairs it with a healthy
    node and runs a reference pair of two free healthy nodes beside it, so its slowness
    is judged against a pair measured at the same time and it is named."""
    doc, verdicts, plans = run(5, lambda rnd, a, b: 0.01 if 4 in (a, b) else 0.4)
    assert plans[0] == [(0, 1), (2, 3)]
    assert len(plans) == 2 and (4, 0) in plans[1] and len(plans[1]) == 2, plans
    assert faulty(doc) == {"node4"}
    assert verdicts == {"node0": "pass", "node1": "pass", "node2": "pass", "node3": "pass", "node4": "fail"}


def test_a_reference_pair_that_reads_slow_blames_no_one():
    """The reference pair is two proven-healthy nodes: if it is the slow one of its
    round, it fails its own records but changes no verdict."""
    doc, verdicts, plans = run(5, lambda rnd, a, b: 0.01 if rnd == 2 and 4 not in (a, b) else 0.4)
    assert faulty(doc) == set()
    assert set(verdicts.values()) == {"pass"}


@pytest.mark.parametrize("n", [3, 4])
def test_a_lone_slow_pair_without_a_reference_is_unknown_not_named(n):
    """Three live nodes cannot measure two pairs at once: a slow lone pair in a later
    round is reported unknown (exit 4), with its figure and the fleet's."""
    gone = {2} if n == 4 else set()
    last = 3 if n == 4 else 2

    def busbw(rnd, a, b):
        return 0.01 if last in (a, b) else 0.4
    failed = {(1, 3): "round 1 with node rank 2: Connection reset"} if n == 4 else {}
    doc, verdicts, _ = run(n, busbw, gone=gone, failed=failed)
    assert verdicts[f"node{last}"] == "unknown"
    assert f"node{last}" not in faulty(doc)
    assert doc["summary"]["unknown"] == [f"node{last}"]
