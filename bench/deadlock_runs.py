"""Issue 41: the cross-group deadlock named right every time, N runs of each
variant through the real launcher with its default options.

    python bench/deadlock_runs.py [--runs 20] [--parallel 4] [--variants a,b] [--out FILE]

Each run starts tests/scripts/deadlock.py on 3 gloo ranks under
xpu_timer_launch, waits for its HANG line (or its end, for the healthy
variant) and reads hang.json. A run is right when the verdict's rule and
culprits are the variant's and it came within 10 s of the break (healthy:
no HANG line and exit 0). Printed per variant: runs, right, the seconds from
the break to the HANG line (median and max), and each wrong run's line.
Runs go ``--parallel`` at a time: on 2 cores keep it at 2, where start-up
alone takes seconds of CPU; the 16 cores of the device host take 6.

``--starve SHARES`` (root, a cgroup v1 cpu controller): the jobs run in a cpu
cgroup of that weight beside two spinning processes a core at the full 1024,
so that a rank which computes gets a few percent of a core, as a loaded CI
VM once gave the healthy variant's computing rank (taken as blocked, its
crossed waits as a deadlock, before the agent counted CPU waited for).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.launch_job import ROOT, Launch  # noqa: E402
from diag.common.net import free_port  # noqa: E402
from tests.phases import CPU_CGROUPS, remove_cgroup  # noqa: E402  (make test's cgroup, the same v1 cpu controller)

SCRIPT = os.path.join(ROOT, "tests", "scripts", "deadlock.py")
WITHIN_S = 10.0
# name -> (the script's arguments, the rule, the culprits); rule None: healthy, no verdict
VARIANTS = {
    "skip-default": (["--mode", "skip-default", "--at", "10", "--rank", "1"], "deadlock", [1]),
    "skip-stats": (["--mode", "skip-stats", "--at", "7", "--rank", "0"], "deadlock", [0]),
    "extra-stats": (["--mode", "extra-stats", "--at", "8", "--rank", "2"], "deadlock", [2]),
    "three-groups": (["--groups", "3", "--mode", "skip-default", "--at", "6", "--rank", "2"], "deadlock", [2]),
    "first-step": (["--mode", "skip-default", "--at", "1", "--rank", "1"], "deadlock", []),
    "healthy-async": (["--mode", "async-compute", "--at", "4", "--compute-s", "8", "--steps", "8"], None, []),
    # as tests/functional/test_deadlock.py runs it: a quarter of each 100 ms computed
    "healthy-async-quarter": (["--mode", "async-compute", "--at", "4", "--compute-s", "8", "--busy-share", "0.25",
                               "--steps", "8"], None, []),
}


def one(name: str, workdir: str) -> dict:
    args, rule, culprits = VARIANTS[name]
    # A port of its own: torchrun's default (29500) is every concurrent job's store
    job = Launch(["--nproc-per-node", "3", "--master-port", str(free_port()),
                  "--timeline-path", os.path.join(workdir, "tl"), SCRIPT, *args],
                 env={"XPU_TIMER_DUMP_TOOLS": "py-spy"})
    try:
        if rule is None:
            code = job.wait(240)
            hangs = job.matching(r"^HANG: ")
            return {"variant": name, "right": code == 0 and not hangs, "after_s": None,
                    "line": hangs[0] if hangs else f"exit {code}, no verdict"}
        broke = job.wait_line(r"^BREAK rank ", 180)
        hang = job.wait_line(r"^HANG: ", 60)
        if broke is None or hang is None:
            return {"variant": name, "right": False, "after_s": None,
                    "line": "no BREAK" if broke is None else "no HANG within 60 s"}
        doc = {}
        deadline = time.monotonic() + 30
        while not doc and time.monotonic() < deadline:
            for path in glob.glob(os.path.join(workdir, "tl", "*", "*", "hang.json")):
                with open(path) as f:
                    doc = json.load(f)
            time.sleep(0.2)
        after = hang[0] - broke[0]
        got_rule = (doc.get("rule") or {}).get("name")
        right = got_rule == rule and doc.get("culprits") == culprits and after <= WITHIN_S
        return {"variant": name, "right": right, "after_s": round(after, 2), "rule": got_rule,
                "culprits": doc.get("culprits"), "line": hang[1]}
    finally:
        job.kill()


def _said(result: dict) -> dict:
    """Each run as it ends: a run cut short by its limit still leaves these."""
    print(f"run {result['variant']}: {'right' if result['right'] else 'WRONG'} after {result['after_s']} s: "
          f"{result['line'][:300]}", flush=True)
    return result


def starve(shares: int) -> tuple[str, list[subprocess.Popen]]:
    """Spinners at full weight, two a core, then this process (and every job
    it starts) into a new cpu cgroup of ``shares``."""
    path = os.path.join(CPU_CGROUPS, f"deadlock-runs-{os.getpid()}")
    os.mkdir(path)
    with open(os.path.join(path, "cpu.shares"), "w") as f:
        f.write(str(shares))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    return path, hogs


def unstarve(path: str, hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        hog.kill()
        hog.wait()
    remove_cgroup(path)    # this process back to the root group, and the group gone


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", help="write every run's result here (JSON)")
    ap.add_argument("--starve", type=int, metavar="SHARES",
                    help="run the jobs in a cpu cgroup of this weight beside two spinners a core (root)")
    args = ap.parse_args()
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        print(f"deadlock_runs: unknown variant(s) {', '.join(unknown)}; use some of {', '.join(VARIANTS)}",
              file=sys.stderr)
        return 2
    todo = [name for _ in range(args.runs) for name in names]   # interleaved: no variant gets the quiet hour
    started = time.monotonic()
    try:
        starved = starve(args.starve) if args.starve else None
    except OSError as e:
        print(f"deadlock_runs: --starve needs root and a cgroup v1 cpu controller ({e.strerror}: {CPU_CGROUPS})",
              file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.parallel) as pool:
            results = list(pool.map(lambda iv: _said(one(iv[1], os.path.join(tmp, str(iv[0])))), enumerate(todo)))
    finally:
        if starved:
            unstarve(*starved)
    print(f"{len(results)} runs in {time.monotonic() - started:.0f} s, {args.parallel} at a time, "
          f"{os.cpu_count()} cores" + (f", starved: cpu.shares {args.starve} beside {2 * os.cpu_count()} spinners"
                                       if args.starve else ""))
    print(f"{'variant':<16}{'runs':>6}{'right':>7}{'median s':>10}{'max s':>8}")
    for name in names:
        mine = [r for r in results if r["variant"] == name]
        times = [r["after_s"] for r in mine if r["after_s"] is not None]
        print(f"{name:<16}{len(mine):>6}{sum(r['right'] for r in mine):>7}"
              f"{statistics.median(times) if times else float('nan'):>10.1f}{max(times, default=float('nan')):>8.1f}")
        for r in mine:
            if not r["right"]:
                print(f"  wrong: {r['line'][:400]}")
    if args.out:
        tmp_out = args.out + ".tmp"
        with open(tmp_out, "w") as f:
            json.dump(results, f, indent=1)
        os.replace(tmp_out, args.out)
    return 0 if all(r["right"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
