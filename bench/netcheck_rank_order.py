"""Ring all-reduce time in the job's order against netcheck's topology order.

    sudo .venv/bin/python bench/netcheck_rank_order.py [--nodes 4] [--rate 32mbit] [--size 256K]

The namespace test bed of tests/netcheck: two bridges joined by one throttled
veth, nodes interleaved by node rank (even ranks on one bridge, odd on the
other), as a job's order often puts them. netcheck --rank-order writes the
order; then a 4-rank gloo all-reduce runs twice, ranks in node-rank order and
ranks in the suggested order, and the median time per all-reduce of each is
printed. Needs root (ip netns, tc).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from diag.common.units import parse_size  # noqa: E402
from bench.netns_cluster import PYTHON, REPO, Cluster, namespaces_unavailable  # noqa: E402

WORKER = """
import os, statistics, sys, time, torch, torch.distributed as dist
rank, world, addr, port, size = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
t = torch.ones(size // 4)
times = []
for i in range(8):
    dist.barrier()
    start = time.perf_counter()
    dist.all_reduce(t)
    times.append(time.perf_counter() - start)
if rank == 0:
    print(statistics.median(times[2:]))
dist.destroy_process_group()
"""


def ring(cluster: Cluster, ranks: list[int], size: int, port: int) -> float:
    """Median seconds per all-reduce with node k as rank ranks[k]."""
    master = ranks.index(0)
    procs = []
    for k in range(cluster.n):
        env = dict(os.environ, GLOO_SOCKET_IFNAME=cluster.node_if[k])
        procs.append(subprocess.Popen(["ip", "netns", "exec", cluster.ns[k], PYTHON, "-c", WORKER, str(ranks[k]),
                                       str(cluster.n), cluster.addr[master], str(port), str(size)],
                                      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("all-reduce failed: " + " | ".join(o[1][-500:] for o in outs))
    return float(outs[master][0].strip())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rate", default="32mbit")
    ap.add_argument("--size", default="256K")
    args = ap.parse_args()
    why = namespaces_unavailable()
    if why:
        print(f"skipped: {why}")
        return 0
    cluster = Cluster(args.nodes, split=True)
    try:
        cluster.up()
        cluster.throttle_link(args.rate)
        with tempfile.TemporaryDirectory() as tmp:
            order_file = Path(tmp) / "order.json"
            res = cluster.run_all(lambda k: ["--size", "1M", "--warmup", "1", "--iters", "3", "--timeout", "20s",
                                             "--min-busbw", "0.0001", "--mad-z", "1000",
                                             "--rank-order", str(order_file) if k == 0 else str(Path(tmp) / f"{k}.json")],
                                  port=29691, timeout=300)
            if res[0][0] != 0:
                raise SystemExit(f"netcheck failed: {res[0][2][-2000:]}")
            doc = json.loads(order_file.read_text())
        suggested = [doc["order"][str(k)] for k in range(args.nodes)]
        size = parse_size(args.size, "--size")
        job = ring(cluster, list(range(args.nodes)), size, 29692)
        topo = ring(cluster, suggested, size, 29693)
        print(f"groups: {[[n['node_rank'] for n in g] for g in doc['groups']]}; ranks by node: {suggested}")
        print(f"ring all-reduce {args.size}, {args.nodes} nodes, link {args.rate}: job order {job * 1e3:.0f} ms, "
              f"topology order {topo * 1e3:.0f} ms ({job / topo:.2f}x)")
    finally:
        cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
