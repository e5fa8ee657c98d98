"""Issue 36's healthy matrix at full length, under the launcher's default
options: each pause that only looks stuck, healthy and hung for real.

    python bench/verdict_matrix.py [--cases save,dcp,eval,compile,loader,sleep] [--nproc 2] [--out FILE]

Healthy: the pause lasts the issue's length (a 90 s torch.save or DCP
checkpoint into throttled storage, 60 s of evaluation, a compile warm-up of
60 s, loader workers 40 s to start, every rank sleeping 60 s); the job must
end with no HANG or SLOW line. Hung: the same pause never ends; printed is
how long after it the HANG line came and which rule fired (defaults:
blocked after 30 s; every rank sleeping for good is the idle rule's, after
--idle-timeout's 10 minutes, so that case's hung version is left out unless
--with-idle).

The jobs are tests/scripts/pauses.py under the real xpu_timer_launch, gloo,
one after another (each uses the machine's cores). tests/functional/
test_verdicts.py is the same matrix, scaled down, in `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.launch_job import Launch  # noqa: E402
from diag.common.atomic import write_atomic  # noqa: E402

PAUSES = os.path.join(ROOT, "tests", "scripts", "pauses.py")
LENGTHS = {"save": 90, "dcp": 90, "eval": 60, "compile": 60, "loader": 40, "sleep": 60}


def run(case: str, pause: str, nproc: int, limit: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="xpu-verdicts-") as tmp:
        job = Launch(["--nproc-per-node", str(nproc), "--timeline-path", os.path.join(tmp, "tl"), PAUSES, case, pause],
                     env={"PAUSES_OUT": tmp, "XPU_TIMER_DUMP_TOOLS": "py-spy"})
        try:
            paused = job.wait_line(r"^PAUSE rank=0 ", 300)
            if pause == "forever":
                hang = job.wait_line(r"^HANG: ", limit)
                rule = re.search(r"; rule (\w+): ", hang[1]) if hang else None
                idle = hang is not None and hang[1].startswith("HANG: idle:")
                return {"case": case, "version": "hung", "named_after_s":
                        round(hang[0] - float(paused[1].split()[3]), 1) if hang and paused else None,
                        "rule": rule.group(1) if rule else ("idle" if idle else None),
                        "line": hang[1] if hang else None}
            code = job.wait(limit)
            resumed = job.wait_line(r"^RESUMED rank=0 ", 1)
            return {"case": case, "version": "healthy", "exit": code,
                    "pause_s": round(float(resumed[1].split()[3]) - float(paused[1].split()[3]), 1)
                    if paused and resumed else None,
                    "verdicts": job.matching(r"HANG|SLOW")}
        finally:
            job.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(LENGTHS))
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--with-idle", action="store_true", help="also every rank sleeping for good (10 min)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        rows.append(run(case, str(LENGTHS[case]), args.nproc, LENGTHS[case] + 240))
        print(json.dumps(rows[-1]), flush=True)
        if case != "sleep" or args.with_idle:
            rows.append(run(case, "forever", args.nproc, 700 if case == "sleep" else 120))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'case':8} {'healthy: pause, verdicts':28} hung: named after, rule")
    for case in args.cases.split(","):
        h = next(r for r in rows if r["case"] == case and r["version"] == "healthy")
        g = next((r for r in rows if r["case"] == case and r["version"] == "hung"), None)
        hung = f"{g['named_after_s']} s, {g['rule']}" if g else "not run"
        print(f"{case:8} {str(h['pause_s']) + ' s, ' + str(len(h['verdicts'])) + ' verdicts':28} {hung}")
    if args.out:
        write_atomic(args.out, json.dumps(rows, indent=1).encode())


if __name__ == "__main__":
    main()
