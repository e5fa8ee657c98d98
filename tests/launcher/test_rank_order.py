"""xpu_timer_launch --rank-order: the static rendezvous takes this node's rank from netcheck's order."""

import json

import pytest

from diag.common.net import local_addrs
from diag.common.options import ConfigError
from diag.launcher.config import parse_args


def _order(tmp_path, mine_rank=2, order=None):
    nodes = [{"node_rank": 0, "node": "far0", "hostname": "far0", "addr": "198.51.100.1"},
             {"node_rank": 1, "node": "far1", "hostname": "far1", "addr": "198.51.100.2"},
             {"node_rank": mine_rank, "node": "me", "hostname": "not-this-host", "addr": local_addrs()[0]}]
    path = tmp_path / "order.json"
    path.write_text(json.dumps({"version": 1, "source": "measured", "order": order or {"0": 0, "2": 1, "1": 2},
                                "groups": [nodes[:1] + nodes[2:], nodes[1:2]]}))
    return str(path)


def test_static_rendezvous_takes_the_suggested_rank_matched_by_address(tmp_path):
    cfg = parse_args(["--rank-order", _order(tmp_path), "--nnodes", "3", "--node-rank", "2", "--master-addr",
                      "198.51.100.1", "--timeline-path", str(tmp_path), "t.py"], {})
    assert cfg.node_rank == 1
    i = cfg.torchrun_argv.index("--node-rank")
    assert cfg.torchrun_argv[i + 1] == "1" and cfg.torchrun_argv.count("--node-rank") == 1
    assert cfg.rank_order_note == "--rank-order: node rank 2 -> 1 (matched by address: me)"


def test_c10d_rendezvous_is_left_alone_and_says_so(tmp_path):
    argv = ["--rank-order", _order(tmp_path), "--nnodes", "3", "--rdzv-backend", "c10d", "--rdzv-endpoint",
            "198.51.100.1:29400", "--timeline-path", str(tmp_path), "t.py"]
    cfg = parse_args(argv, {})
    assert "--node-rank" not in cfg.torchrun_argv
    assert cfg.rank_order_note.startswith("--rank-order: not applied: the c10d rendezvous assigns node ranks")


def test_a_file_that_moves_node_rank_0_or_lacks_this_node_is_one_line(tmp_path):
    base = ["--nnodes", "3", "--node-rank", "2", "--timeline-path", str(tmp_path), "t.py"]
    with pytest.raises(ConfigError, match="node rank 0 must stay first"):
        parse_args(["--rank-order", _order(tmp_path, order={"0": 1, "1": 0, "2": 2})] + base, {})
    other = tmp_path / "other.json"
    doc = json.loads(open(_order(tmp_path)).read())
    doc["groups"] = [[n for n in g if n["node"] != "me"] for g in doc["groups"]]
    other.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="this node .* is not in it by address or hostname"):
        parse_args(["--rank-order", str(other)] + base, {})
