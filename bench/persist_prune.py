"""What the job-wide prune costs the agent's persist thread, paired in one run.

A persist now reads the shared --ckpt-dir once (diag.recover.persist.
wanted_by_the_job: every step directory listed, to find the newest step
that every rank has and the steps other ranks are writing) before it prunes
its node's ranks. This lays out a shared directory as a job of WORLD ranks
leaves it (STEPS step directories, each with every rank's copy, one other
node writing the newest) and times, alternating, a node's prune of its
LOCAL ranks the old way (its own copies only) and the new way (one read of
the directory, then the same prunes). Nothing is removed in either way:
each rank keeps all its copies (keep = STEPS), so both read the same tree
every time. Copies are empty rank directories: the cost is in listing.

    .venv/bin/python bench/persist_prune.py                  # 64, 1024, 8192 ranks
    .venv/bin/python bench/persist_prune.py --world 100000 --pairs 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from diag.recover import api, persist  # noqa: E402


def layout(root: str, world: int, steps: int) -> None:
    for step in range(1, steps + 1):
        sdir = persist.step_dir(root, step)
        os.makedirs(sdir, mode=0o700)
        for rank in range(world):
            os.mkdir(os.path.join(sdir, api.RANK_DIR.format(rank=rank)), 0o700)
    # another node is writing the newest step (its temp directory, fresh)
    os.mkdir(os.path.join(persist.step_dir(root, steps), f".tmp-{api.RANK_DIR.format(rank=world - 1)}-x"), 0o700)


def once(root: str, world: int, steps: int, local: list[int], job_wide: bool) -> float:
    t0 = time.perf_counter()
    held = persist.wanted_by_the_job(root, world, mine=set(local)) if job_wide else set()
    for rank in local:
        persist.prune(root, rank, keep=steps, held=held)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", default="64,1024,8192", help="world sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=5, help="step directories on disk")
    parser.add_argument("--local", type=int, default=8, help="ranks of the node that prunes")
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args()
    print(f"{'world':>7} {'old ms':>8} {'new ms':>8} {'added ms':>9} {'new/old':>8}")
    for world in map(int, args.world.split(",")):
        root = tempfile.mkdtemp(prefix="persist-prune-")
        try:
            layout(root, world, args.steps)
            local = list(range(min(args.local, world)))
            old, new = [], []
            for i in range(args.pairs):          # AB BA AB ...: drift hits both alike
                order = (False, True) if i % 2 == 0 else (True, False)
                for job_wide in order:
                    (new if job_wide else old).append(once(root, world, args.steps, local, job_wide))
            assert persist.wanted_by_the_job(root, world, mine=set(local)) == {args.steps}
            o, n = statistics.median(old) * 1e3, statistics.median(new) * 1e3
            print(f"{world:>7} {o:>8.2f} {n:>8.2f} {n - o:>9.2f} {n / o:>8.2f}")
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
