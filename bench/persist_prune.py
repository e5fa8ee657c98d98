"""What a node's prune costs the agent's persist thread, before and after a
change, paired in one run.

After its writes, a persist prunes its node's ranks' copies in the --ckpt-dir
that every node of the job shares. This lays out such a directory as a job of
WORLD ranks leaves it (STEPS step directories, each with every rank's copy,
and another node writing the newest) and times a node's prune of its LOCAL
ranks: with this tree's diag.recover.persist, and with the one under
``--before DIR`` (``git archive REV diag | tar -x -C DIR``), alternating
(AB BA AB ...) in fresh processes so that drift hits both alike. Nothing is
removed either way (every rank keeps all its copies), so every timing reads
the same tree. Copies are empty rank directories: the cost is in the lookups.

    git archive c2d9bd9 diag | (mkdir -p /tmp/before && tar -x -C /tmp/before)
    .venv/bin/python bench/persist_prune.py --before /tmp/before        # 64, 1024, 8192 ranks
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def layout(root: str, world: int, steps: int) -> None:
    for step in range(1, steps + 1):
        sdir = os.path.join(root, f"step-{step:08d}")
        os.makedirs(sdir, mode=0o700)
        for rank in range(world):
            os.mkdir(os.path.join(sdir, f"rank-{rank:05d}"), 0o700)
    os.mkdir(os.path.join(root, f"step-{steps:08d}", f".tmp-rank-{world - 1:05d}-x"), 0o700)


def child(root: str, world: int, steps: int, local: int, repeats: int) -> None:
    """One process's timing of a node's prune (median of ``repeats``), in ms,
    with whichever diag is first on sys.path."""
    from diag.recover import persist
    ranks = list(range(min(local, world)))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        if hasattr(persist, "wanted_by_the_job"):        # the job-wide prune
            held = persist.wanted_by_the_job(root, world, mine=set(ranks))
            persist.prune(root, ranks, keep=steps, held=held)
        else:                                            # before: each rank on its own
            for rank in ranks:
                persist.prune(root, rank, keep=steps)
        times.append(time.perf_counter() - t0)
    print(statistics.median(times) * 1e3)


def timed(tree: str, root: str, args, world: int) -> float:
    env = dict(os.environ, PYTHONPATH=tree, PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, __file__, "--child", root, str(world), str(args.steps), str(args.local),
                          str(args.repeats)], env=env, capture_output=True, text=True, check=True, cwd="/")
    return float(out.stdout.split()[-1])


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        root, world, steps, local, repeats = sys.argv[2:7]
        child(root, int(world), int(steps), int(local), int(repeats))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="a tree holding the diag package to compare against")
    parser.add_argument("--world", default="64,1024,8192", help="world sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=5, help="step directories on disk")
    parser.add_argument("--local", type=int, default=8, help="ranks of the node that prunes")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5, help="timings in each process")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.before, "diag", "recover", "persist.py")):
        print(f"persist_prune: --before {args.before}: no diag/recover/persist.py there; "
              f"make it with git archive REV diag | tar -x -C DIR", file=sys.stderr)
        return 2
    print(f"{'world':>7} {'before ms':>10} {'after ms':>9} {'after/before':>13}")
    for world in map(int, args.world.split(",")):
        root = tempfile.mkdtemp(prefix="persist-prune-")
        try:
            layout(root, world, args.steps)
            before, after = [], []
            for i in range(args.pairs):
                order = ((args.before, before), (ROOT, after))
                for tree, into in order if i % 2 == 0 else order[::-1]:
                    into.append(timed(tree, root, args, world))
            b, a = statistics.median(before), statistics.median(after)
            print(f"{world:>7} {b:>10.2f} {a:>9.2f} {a / b:>13.2f}", flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
