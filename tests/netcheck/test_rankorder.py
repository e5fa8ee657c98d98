"""rankorder: every pair once, groups split at the largest bandwidth gap, a switch map overrides."""

import json

import pytest

from diag.netcheck.rankorder import (NodeId, close_threshold, document, group_by_switch, group_measured,
                                     load_topology, round_robin)


@pytest.mark.parametrize("n", [2, 3, 5, 6])
def test_round_robin_measures_every_pair_once_in_disjoint_rounds(n):
    rounds = round_robin(list(range(n)))
    pairs = [frozenset(p) for r in rounds for p in r]
    assert len(pairs) == len(set(pairs)) == n * (n - 1) // 2
    for r in rounds:
        members = [u for p in r for u in p]
        assert len(members) == len(set(members))


def test_groups_split_at_the_largest_gap_and_noise_keeps_one_group():
    nodes = [NodeId(k, f"vm#{k}", "vm", f"10.0.0.{k + 1}") for k in range(4)]
    fast, slow = 0.04, 0.002
    bw = {frozenset((a, b)): (fast if a % 2 == b % 2 else slow) * (1 + 0.3 * a) for a in range(4) for b in range(a)}
    doc = document(group_measured(nodes, bw), bw, "measured")
    assert [[n["node_rank"] for n in g] for g in doc["groups"]] == [[0, 2], [1, 3]]
    assert doc["order"] == {"0": 0, "2": 1, "1": 2, "3": 3}
    assert close_threshold([1.0, 1.6, 1.3, 0.9]) == 0.0      # 1.8x spread: noise, not a tier


def test_switch_map_overrides_and_names_a_node_it_lacks(tmp_path):
    nodes = [NodeId(k, f"n{k}", f"n{k}", f"10.0.0.{k + 1}") for k in range(3)]
    path = tmp_path / "topo.json"
    path.write_text(json.dumps({"n0": "sw2", "10.0.0.2": "sw1", "n2": "sw2"}))
    groups = group_by_switch(nodes, load_topology(str(path)), str(path))
    assert [[n.node_rank for n in g] for g in groups] == [[0, 2], [1]]
    with pytest.raises(ValueError, match=r"no switch for node rank 2 \(n2, n2, 10.0.0.3\)"):
        group_by_switch(nodes, {"n0": "a", "n1": "b"}, "t.json")
    path.write_text("[1]")
    with pytest.raises(ValueError, match="must be a JSON object"):
        load_topology(str(path))
