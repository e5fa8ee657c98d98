"""What a launched job costs the suite in CPU, its launcher started fresh
against forked from the preloaded-torch server (tests/functional/launch.py).

Usage: ``python tests/launch_cost.py [RUNS]`` from the repository root, with
the venv's python. Runs a 2-rank torchless job (scripts/torchless_idle.py)
RUNS times each way, alternating, one at a time, and prints the CPU-seconds
a job took (the launcher, its agent and collector, the ranks, all reaped:
the forked ones through the server, stopped at the end), and the server's own
start-up once."""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time

# the root, in place of tests/ (whose bench package would hide the top-level bench/)
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from diag.common.net import free_port  # noqa: E402
from tests.functional.launch import SCRIPTS, Launch  # noqa: E402
from tests import preloaded  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _job(fresh: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        job = Launch(["--nproc-per-node", "2", "--master-port", str(free_port()), "--timeline-path", tmp,
                      os.path.join(SCRIPTS, "torchless_idle.py"), "none", "0"], fresh=fresh)
        try:
            code = job.wait(120)
        finally:
            job.kill()
        assert code == 0, job.output()[-3000:]


def main(runs: int) -> None:
    start = _cpu()
    server = preloaded._get()
    taken = {True: [], False: []}
    for _ in range(runs):
        for fresh in (True, False):
            before, t = _cpu(), time.monotonic()
            _job(fresh)
            taken[fresh].append((_cpu() - before, time.monotonic() - t))
    server.stop()
    forked_total = _cpu() - start - sum(c for c, _ in taken[True])
    fresh_cpu = sorted(c for c, _ in taken[True])[runs // 2]
    print(f"fresh launcher: {fresh_cpu:.2f} CPU-s a job (median of {runs}), "
          f"wall {sorted(w for _, w in taken[True])[runs // 2]:.2f} s")
    print(f"forked launcher: {forked_total / runs:.2f} CPU-s a job (mean of {runs}, the server's start-up included), "
          f"wall {sorted(w for _, w in taken[False])[runs // 2]:.2f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
