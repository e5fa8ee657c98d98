"""netcheck wall time against node count: 4, 8, 16 namespaced CPU nodes, one throttled.

    sudo .venv/bin/python bench/netcheck_scale.py [--nodes 4 8 16] [--rate 32mbit]

For each size it runs the full check twice in the same session, side by side:
a healthy fleet (one round) and the same fleet with one node's link throttled
by tc tbf. It prints the rounds used, the coordinator's per-round times and
the ratio of the whole check to its first round (target: <= 3 rounds and
<= 2x one round for a single fault). Needs root (ip netns, tc).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.netns_cluster import Cluster, namespaces_unavailable  # noqa: E402

# Same settings as tests/netcheck/test_netns_pairwise.py (why: see there).
ARGS = ["--size", "1M", "--warmup", "1", "--iters", "3", "--timeout", "20s", "--join-timeout", "240s",
        "--rel-ratio", "0.2"]


def one_run(n: int, fault: int | None, rate: str, port: int) -> dict:
    cluster = Cluster(n)
    try:
        cluster.up()
        if fault is not None:
            cluster.throttle(fault, rate)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "faults.json"
            start = time.monotonic()
            results = cluster.run_all(lambda k: ARGS + (["--output", str(out)] if k == 0 else []), port=port,
                                      timeout=600)
            wall = time.monotonic() - start
            doc = json.loads(out.read_text())
    finally:
        cluster.down()
    timing = doc["summary"]["timing"]
    return {"n": n, "fault": fault, "rc": results[0][0], "wall_s": wall, "rounds": doc["summary"]["rounds"],
            "rounds_s": timing["rounds_s"], "check_s": timing["check_s"],
            "faulty": sorted(f["node"] for f in doc["faulty"])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--rate", default="32mbit", help="tbf rate of the faulty node's link")
    args = p.parse_args()
    reason = namespaces_unavailable()
    if reason:
        print(f"netcheck_scale: cannot run: {reason}", file=sys.stderr)
        return 2
    print(f"{'nodes':>5} {'fault':>6} {'rounds':>6} {'round times (s)':>24} {'check s':>8} {'x round1':>8} "
          f"{'vs healthy':>10} {'wall s':>7}  found")
    worst_rounds, worst_ratio = 0, 0.0
    for i, n in enumerate(args.nodes):
        healthy = one_run(n, None, args.rate, 29700 + 2 * i)
        faulty = one_run(n, n // 2 + 1, args.rate, 29701 + 2 * i)
        for r in (healthy, faulty):
            ratio = r["check_s"] / r["rounds_s"][0] if r["rounds_s"] else float("nan")
            vs = r["check_s"] / healthy["check_s"]
            times = " ".join(f"{t:.2f}" for t in r["rounds_s"])
            print(f"{r['n']:>5} {str(r['fault']):>6} {r['rounds']:>6} {times:>24} {r['check_s']:>8.2f} "
                  f"{ratio:>8.2f} {vs:>10.2f} {r['wall_s']:>7.1f}  {','.join(r['faulty']) or '-'}")
        ok = faulty["faulty"] == [f"node{n // 2 + 1}"] and not healthy["faulty"]
        worst_rounds = max(worst_rounds, faulty["rounds"])
        worst_ratio = max(worst_ratio, faulty["check_s"] / faulty["rounds_s"][0])
        if not ok:
            print(f"  n={n}: WRONG verdict: healthy run found {healthy['faulty']}, faulty run found {faulty['faulty']}")
    print(f"single fault: at most {worst_rounds} rounds (target <= 3); whole check at most "
          f"{worst_ratio:.2f}x its first round (target <= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
