"""Step-time cost of the NCCL profiler plugin on GPT-2 small in DDP (docs/link.md), on GPUs.

    python3 bench/link_step_pairs.py [--nproc 1] [--warmup 10] [--pairs 150] [--transport default|socket] [--out FILE]

One job under xpu_timer_launch (so NCCL loads the plugin from the
NCCL_PROFILER_PLUGIN the launcher sets with --link-plugin): after --warmup steps, --pairs pairs
of steps with the plugin's events on and off (xpu_timer_link_bypass sets
NCCL's activation mask to 0: NCCL makes no profiler calls), in ABBA order,
every rank switching at the same step (tests/gpu/scripts/link_ddp.py). Paired
inside one job, so the job-to-job level spread (docs/kernel_hook.md) does not
enter. Prints the medians, the mean paired difference in % with a bootstrap
95 % interval, and what the plugin's table held. Needs CUDA.

--transport socket forces NCCL onto its socket transport over loopback (no
P2P, no SHM), where every channel's traffic goes through NCCL's proxy thread
as between nodes: the proxy-step events the plugin counts. With the default
transport on one host (NVLink P2P) NCCL's proxy carries nothing and only the
kernel-channel events reach the plugin.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "gpu", "scripts", "link_ddp.py")


def summarize(on: list[float], off: list[float], seed: int = 0) -> dict:
    diffs = [(a - b) / b * 100 for a, b in zip(on, off)]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
    return {"pairs": len(diffs), "median_on_ms": statistics.median(on) * 1e3,
            "median_bypassed_ms": statistics.median(off) * 1e3, "mean_diff_pct": statistics.fmean(diffs),
            "ci95_pct": [means[int(0.025 * len(means))], means[int(0.975 * len(means)) - 1]]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=150)
    ap.add_argument("--transport", choices=("default", "socket"), default="default")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    try:
        import torch
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        gpus = 0
    if gpus < args.nproc:
        print(f"link_step_pairs: skipped: needs {args.nproc} CUDA GPU(s), found {gpus}")
        return 0
    subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "kernel_hook")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
        if args.transport == "socket":
            env.update(NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_IB_DISABLE="1", NCCL_NET="Socket",
                       NCCL_SOCKET_IFNAME="lo")
        run = subprocess.run([sys.executable, "-m", "diag.launcher.main", "--link-plugin", "--nproc-per-node", str(args.nproc),
                              "--hang-timeout", "20s", "--timeline-path", os.path.join(tmp, "tl"), SCRIPT, tmp,
                              str(args.warmup), str(args.pairs)], cwd=ROOT, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
            return 1
        with open(os.path.join(tmp, "link_rank0.json")) as f:
            doc = json.load(f)
    res = summarize(doc["pairs"]["on"], doc["pairs"]["bypassed"])
    # A healthy job with the plugin, under the same 20 s hang timeout as the
    # acceptance test: any HANG or SLOW line here is a false alarm.
    res["false_alarms"] = [l for l in (run.stdout + run.stderr).splitlines() if l.startswith(("HANG: ", "SLOW: "))]
    entries = doc["table"].get("entries", [])
    res.update(transport=args.transport, model=doc["model"], world_size=doc["world_size"], nccl=doc["nccl"],
               table_entries=len(entries),
               proxy_steps=sum(e["steps_total"] for e in entries if e["kind"] in (0, 1)),
               kernel_ops=sum(e["ops"] for e in entries if e["kind"] == 2))
    print(f"{res['model']}, {res['world_size']} rank(s), {args.transport} transport, "
          f"NCCL {'.'.join(map(str, res['nccl']))}: "
          f"{res['pairs']} pairs, plugin on {res['median_on_ms']:.2f} ms vs bypassed "
          f"{res['median_bypassed_ms']:.2f} ms per step (medians); paired mean {res['mean_diff_pct']:+.3f} % "
          f"[{res['ci95_pct'][0]:+.3f}, {res['ci95_pct'][1]:+.3f}] (95 % bootstrap)")
    print(f"rank 0's table: {res['table_entries']} entries, {res['proxy_steps']} proxy steps, "
          f"{res['kernel_ops']} channel kernels; HANG/SLOW lines under a 20 s hang timeout: "
          f"{len(res['false_alarms'])}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"result": res, "pairs": doc["pairs"]}, f)
    return 1 if res["false_alarms"] else 0


if __name__ == "__main__":
    sys.exit(main())
