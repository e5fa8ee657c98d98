"""The pairwise check on real network namespaces, gloo over TCP, tc tbf for slow links."""

import json
import os
import signal
import socket

import pytest

from diag import faultlist

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180)]

# 1 MiB per op: big enough that a healthy veth is bandwidth-bound even on a
# loaded 2-core CI host, small enough that the throttled node (32 mbit/s, ~0.3 s
# per op) keeps each test short. --rel-ratio 0.2: scheduling noise on a
# shared host reaches 2-5x; the throttle is ~50x.
SMALL = ["--size", "1M", "--warmup", "1", "--iters", "3", "--timeout", "10s", "--join-timeout", "60s",
         "--rel-ratio", "0.2"]
RATE = "32mbit"
# The dropout tests are about a node that stops, not bandwidth (--rel-ratio 0.2
# tolerates a loaded host). A dead or frozen node is noticed after --timeout (its
# heartbeat, its partner's collective): 3 s is what the test waits for; a healthy
# node beats every 0.5 s at nice -10, and its 16 MiB ops take well under 1 s at load 10.
DROPOUT = ["--size", "16M", "--warmup", "1", "--iters", "5", "--timeout", "3s", "--join-timeout", "60s",
           "--rel-ratio", "0.2"]


def _nodes_named(path):
    return set(faultlist.load(path).faulty)


def test_two_faulty_nodes_are_both_found(netns_cluster, tmp_path):
    c = netns_cluster(6)
    c.throttle(1, RATE)
    c.throttle(4, RATE)
    out = tmp_path / "faults.json"
    # Two slow pairs of three outvote the relative rule; the absolute floor
    # (8 MB/s: ~2.5x the throttle, ~4x under the worst healthy pair seen on a loaded host) catches them.
    results = c.run_all(lambda k: SMALL + ["--min-busbw", "0.008"] + (["--output", str(out)] if k == 0 else []),
                        port=29622)
    assert results[0][0] == 1, results[0][2]
    assert _nodes_named(out) == {"node1", "node4"}
    doc = json.loads(out.read_text())
    rules = {r["node"]: r["rule"] for r in doc["records"] if r["metric"] == "node" and r["verdict"] == "fail"}
    assert rules == {"node1": "pairing+absolute", "node4": "pairing+absolute"}


def test_node_dropping_out_mid_test_times_out_and_is_named(netns_cluster, tmp_path):
    c = netns_cluster(4)
    out = tmp_path / "faults.json"
    killed = []

    def on_line(line, procs):
        if "round 1" in line and not killed:
            procs[2].send_signal(signal.SIGKILL)   # node2 dies inside its round-1 pair
            killed.append(2)

    args = DROPOUT
    results = c.run_all(lambda k: args + (["--output", str(out)] if k == 0 else []), port=29623, on_line=on_line)
    rc0, _, err0 = results[0]
    assert killed and results[2][0] == -signal.SIGKILL
    assert rc0 == 1, err0
    fl = faultlist.load(out)
    assert set(fl.faulty) == {"node2"}, out.read_text() + err0[-3000:]
    assert "dropped out or hung" in fl.faulty["node2"]
    assert results[1][0] == 1 and results[3][0] == 1   # survivors finish too, with the verdict


def test_hung_node_is_aborted_and_named(netns_cluster, tmp_path):
    """SIGSTOP: the node's sockets stay open but nothing moves; its partner's collective
    must time out (not get a reset), and the run must end without it."""
    c = netns_cluster(4)
    out = tmp_path / "faults.json"
    stopped = []

    def on_line(line, procs):
        if "round 1" in line and not stopped:
            procs[1].send_signal(signal.SIGSTOP)
            stopped.append(1)

    args = DROPOUT
    results = c.run_all(lambda k: args + (["--output", str(out)] if k == 0 else []), port=29624, on_line=on_line,
                        hung=frozenset({1}))
    assert stopped and results[0][0] == 1, results[0][2]
    fl = faultlist.load(out)
    doc = json.loads(out.read_text())
    assert set(fl.faulty) == {"node1"} and "dropped out or hung" in fl.faulty["node1"], json.dumps(doc, indent=1)
    partner = [r for r in doc["records"] if r["metric"] == "pair" and r["node"] == "node0" and r["round"] == 1]
    assert partner and partner[0]["rule"] in ("timeout", "error")
    assert results[2][0] == 1 and results[3][0] == 1


def test_new_user_run_picks_the_routed_interface_and_names_nodes_apart(netns_cluster, tmp_path):
    """No --iface, no --node-name: every namespace shares this host's hostname, which
    resolves to loopback here, so gloo's default device used to bind 127.0.0.1 and
    every pair was refused. The route to the master picks the veth, and the slow node
    is named uniquely (hostname#node rank) with its address. The launcher then refuses
    that node by address, and only that one."""
    c = netns_cluster(5)      # odd: one node waits in round 1
    c.throttle(3, RATE)
    out = tmp_path / "f0.json"
    results = c.run_all(lambda k: SMALL + ["--output", str(tmp_path / f"f{k}.json")]
                        + (["--format", "slurm"] if k == 0 else []), port=29625, plain=True)
    rc0, out0, err0 = results[0]
    host = socket.gethostname()
    assert rc0 == 1, err0[-3000:]
    assert out0.strip() == f"{host}#3", err0[-4000:]   # sbatch --exclude gets the unique name
    assert f"warning: 5 nodes share the name(s) {host}" in err0
    for k, (rc, _, err) in enumerate(results):     # every node ends with the verdict and the same list
        assert rc == 1, (k, err[-2000:])
        assert _nodes_named(tmp_path / f"f{k}.json") == {f"{host}#3"}
    doc = json.loads(out.read_text())
    assert [(f["node"], f["node_rank"], f["addr"], f["hostname"]) for f in doc["faulty"]] == \
        [(f"{host}#3", 3, c.addr[3], host)]
    nodes = {r["node"]: r for r in doc["records"] if r["metric"] == "node"}
    assert {n: r["extra"]["addr"] for n, r in nodes.items()} == {f"{host}#{k}": c.addr[k] for k in range(5)}
    assert all(r["extra"]["iface"] == c.node_if[k] for k in range(5) for n, r in nodes.items() if n.endswith(f"#{k}"))
    node3 = nodes[f"{host}#3"]
    assert node3["verdict"] == "fail" and node3["rule"].startswith("pairing+relative") and "is healthy" in node3["reason"]
    busbw = [r for r in doc["records"] if r["metric"].endswith(".busbw")]
    assert busbw
    for key in ("node", "gpu", "link", "metric", "value", "unit", "expected", "threshold", "verdict", "reason"):
        assert all(key in r for r in busbw)
    assert doc["summary"]["rounds"] <= 3

    script = tmp_path / "train.py"
    script.write_text("print('TRAINED')\n")
    env = {k: v for k, v in os.environ.items() if k != "XPU_TIMER_NODE_NAME"}
    launch = ["-m", "diag.launcher.main", "--fault-list", str(out), "--no-hook", "--timeline-path",
              str(tmp_path / "tl"), "--nnodes", "1", "--nproc-per-node", "1", str(script)]
    # Side by side: two launchers, on two namespaces of their own.
    refused, started = [c.fork(k, launch, env) for k in (3, 2)]
    (_, refused_err), (started_out, started_err) = (proc.communicate(120) for proc in (refused, started))
    assert refused.returncode == 75 and f"node {host}#3 is marked faulty" in refused_err, refused_err
    assert "(matched by address)" in refused_err
    assert started.returncode == 0 and "TRAINED" in started_out, started_err[-2000:]


def test_node_that_cannot_connect_ends_at_the_deadline_unknown_and_no_one_blamed(netns_cluster, tmp_path):
    """Node 2 reaches the store but none of its pairs can connect (its TCP is dropped).
    --timeout is longer than --deadline, so its round-1 pair cannot finish: the run ends
    at the deadline, node 2 and its partner are unknown (not measured, so neither
    healthy nor faulty), nodes 0 and 1 pass, and the exit status is 4. Node 2 runs as
    `netcheck preflight` (no NVML here: the switchbox part is skipped): it says it is
    unknown and exits 4 too (it used to pass as healthy)."""
    import time
    c = netns_cluster(4)
    port = 29626
    c.isolate(2)
    out = tmp_path / "faults.json"
    # --deadline is what the test waits for: long enough for every node to join and
    # the healthy pair to finish (start-up side by side, about 1 s apart at load 10).
    args = ["--size", "256K", "--warmup", "0", "--iters", "2", "--timeout", "40s", "--deadline", "8s",
            "--join-timeout", "10s"]
    start = time.monotonic()
    results = c.run_all(lambda k: args + (["--output", str(out)] if k == 0 else [])
                        + (["preflight", "--node-name", "node2"] if k == 2 else []), port=port, timeout=60)
    took = time.monotonic() - start
    assert [rc for rc, _, _ in results] == [4, 4, 4, 4], [err[-1500:] for _, _, err in results]
    assert took < 8 + 25, took          # the deadline, plus start-up and exit on a loaded host
    doc = json.loads(out.read_text())
    assert doc["faulty"] == []
    verdicts = {r["node"]: (r["verdict"], r["reason"]) for r in doc["records"] if r["metric"] == "node"}
    assert {n: v for n, (v, _) in verdicts.items()} == {"node0": "pass", "node1": "pass", "node2": "unknown",
                                                        "node3": "unknown"}
    assert "not finished by --deadline 8s" in verdicts["node2"][1]
    assert doc["summary"]["unknown"] == ["node2", "node3"]
    err0 = results[0][2]
    assert "round 1: pair node2<->node3 not finished by --deadline 8s; both stay unknown" in err0
    assert "netcheck preflight: node2 (this node, matched by XPU_TIMER_NODE_NAME) is unknown: not measured" \
        in results[2][2]
    assert not any("gloo" in line.lower() for _, _, err in results for line in err.splitlines()), err0


@pytest.mark.alone   # groups by measured bandwidth: beside another test's load an intra-bridge pair can read as slow as the throttled link
def test_rank_order_groups_nodes_by_bridge(netns_cluster, tmp_path):
    """Two bridges joined by a slow link, nodes interleaved by rank (even ranks on one
    bridge, odd on the other): --rank-order measures every pair and groups the nodes by
    bridge; the order keeps each bridge's nodes together. No node is blamed: the slow
    link is between groups, and the check's own rounds stay on its verdict."""
    c = netns_cluster(4, split=True)
    c.throttle_link(RATE)
    order = tmp_path / "order.json"
    args = SMALL + ["--min-busbw", "0.0001", "--mad-z", "1000"]  # rounds cross the slow link by design
    results = c.run_all(lambda k: args + (["--rank-order", str(order)] if k == 0 else ["--rank-order",
                                                                                       str(tmp_path / f"o{k}.json")]),
                        port=29627)
    assert [rc for rc, _, _ in results] == [0, 0, 0, 0], results[0][2][-3000:]
    doc = json.loads(order.read_text())
    assert doc["source"] == "measured"
    assert [[n["node_rank"] for n in g] for g in doc["groups"]] == [[0, 2], [1, 3]], json.dumps(doc, indent=1)
    assert doc["order"] == {"0": 0, "2": 1, "1": 2, "3": 3}
    assert len(doc["pairs"]) == 6                    # every pair measured
    assert json.loads((tmp_path / "o3.json").read_text()) == doc     # every node gets the same file

    # The order, used: xpu_timer_launch --rank-order on each node (static rendezvous, the
    # usual --node-rank k). Every namespace shares one hostname, so each finds itself by address.
    # The subject is the launcher's rank, not torch's collectives: each worker writes the
    # ranks torchrun gave it (torch-free, 4 fewer torch imports).
    train = tmp_path / "train.py"
    train.write_text("import os, pathlib, sys\n"
                     "e = os.environ\n"
                     "pathlib.Path(sys.argv[1], sys.argv[2]).write_text(f\"{e['GROUP_RANK']} {e['RANK']} {e['WORLD_SIZE']}\")\n")
    port = 29631
    procs = []
    for k in range(4):
        env = {key: v for key, v in os.environ.items() if not key.startswith(("XPU_TIMER_", "MASTER_", "GLOO_"))}
        env.update(XPU_TIMER_JOB_TOKEN="rank-order-test", GLOO_SOCKET_IFNAME=c.node_if[k])
        procs.append(c.fork(k, ["-m", "diag.launcher.main", "--rank-order", str(order), "--no-hook",
                                "--timeline-path", str(tmp_path / "tl"), "--nnodes", "4", "--node-rank", str(k),
                                "--nproc-per-node", "1", "--master-addr", c.addr[0], "--master-port", str(port),
                                "--rdzv-id", "ro", str(train), str(tmp_path), f"node{k}"], env))
    outs = ["".join(p.communicate(timeout=150)) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], "\n".join(outs)[-4000:]
    # node k now runs as the file says: node2 -> 1, node1 -> 2; one job of 4 ranks, each rank once.
    assert {k: (tmp_path / f"node{k}").read_text() for k in range(4)} == \
        {0: "0 0 4", 1: "2 2 4", 2: "1 1 4", 3: "3 3 4"}
    assert "--rank-order: node rank 2 -> 1 (matched by address: node2)" in outs[2], outs[2]
