"""Issue 41 item 6: issue 41's deadlocks and crashes, side by side with what
PyTorch gives a user for each: torchrun's root cause, Flight Recorder's
fr_trace on gloo, and xpu_timer_launch's verdict.

    python bench/deadlock_race.py [--cases a,b] [--tools torchrun,xpu] [--pg-timeout 60]
                                  [--keep DIR] [--out FILE]

The cases, 3 gloo ranks on the CPU, each started once per tool, one run after
another (bench/deadlock_runs.py repeats the xpu side 20 times):
- cross-group: tests/scripts/deadlock.py --mode skip-default --at 10 (rank 1
  skips the world all-reduce and waits in the "stats" group's);
- first-step:  the same skip at step 1, before any step shows the order;
- extra-op:    --mode extra-stats --at 8 --rank 2 (a "stats" all-reduce more);
- size-mismatch: tests/scripts/crash_skip.py two 10 40 (gloo aborts);
- one-short:   tests/scripts/crash_skip.py one 10 40 (rank 1 exits 0 one
  all-reduce short, its peers fail).
The fault's time is the planted rank's `BREAK ...` line (crash_skip.py
prints its unix time; deadlock.py's line is timed when it arrives).

The tools, each with its defaults:
- torchrun: `python -m torch.distributed.run --standalone`, the script under
  bench/gloo_user_worker.py: init_process_group(timeout=--pg-timeout), as a
  user would set it (gloo's default, 30 minutes, says nothing for half an
  hour), and Flight Recorder (TORCH_FR_BUFFER_SIZE=2000, torch 2.13's
  default, and TORCH_FR_DUMP_TEMP_FILE). torch 2.13 records gloo
  collectives in FR but never writes them out (the dump on timeout is the
  NCCL watchdog's; the CPU
  build has no TORCH_NCCL_DUMP_ON_TIMEOUT): the worker dumps each rank's
  buffer when an exception, its exit or torchrun's SIGTERM ends it. After the
  job, fr_trace reads the dumps as shipped; gloo's dumps carry no usable
  pg_config (one entry named "", ranks often empty) and fr_trace stops on a
  KeyError, so it runs a second time on copies whose pg_config the bench
  fills in (every group of these scripts spans all ranks): `FR analyzer,
  pg_config filled`.
- xpu: `xpu_timer_launch` with default options: its HANG line (culprits from
  hang.json) or its closing FAILED line (culprits from failure.json).

Printed per run and source (bench/verdict_race.py's table): by (`error`: the
first exception a worker printed, naming the rank that printed it; `root
cause`: torchrun's "Root Cause (first observed failure)"; `FR analyzer`,
timed by the last dump, or `FR dump` where no rank wrote one; `HANG
<rule>`, `FAILED`), after_s from the fault, the ranks named,
right (`yes`: the planted rank alone; `partly`: among others; `no`: only
others; `-`: no one). docs/collector.md, "Side by side with what PyTorch
gives", reads one run (docs/bench-runs/s21-deadlock-race.txt): about 5.5
minutes on 2 cores, most of it torchrun's hangs waiting out --pg-timeout.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import pickle
import re
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.launch_job import Launch  # noqa: E402
from bench.verdict_race import _fr_verdicts, _verdicts_in_lines, collect_names, judge, table  # noqa: E402
from diag.common.atomic import write_atomic  # noqa: E402
from diag.common.net import free_port  # noqa: E402

SCRIPTS = os.path.join(ROOT, "tests", "scripts")
WORKER = os.path.join(ROOT, "bench", "gloo_user_worker.py")
NPROC = 3
FR_PREFIX = "gloo_trace_rank_"
BREAK = re.compile(r"^BREAK rank (\d+) step \d+ \S+(?: ([\d.]+))?$")
TOOLS = ("torchrun", "xpu")


@dataclasses.dataclass(frozen=True)
class Case:
    script: str
    args: tuple[str, ...]
    rank: int          # the planted rank: the one a right verdict names alone


CASES = {
    "cross-group": Case("deadlock.py", ("--mode", "skip-default", "--at", "10"), 1),
    "first-step": Case("deadlock.py", ("--mode", "skip-default", "--at", "1"), 1),
    "extra-op": Case("deadlock.py", ("--mode", "extra-stats", "--at", "8", "--rank", "2"), 2),
    "size-mismatch": Case("crash_skip.py", ("two", "10", "40"), 1),
    "one-short": Case("crash_skip.py", ("one", "10", "40"), 1),
}


@dataclasses.dataclass(frozen=True)
class Config:
    cases: tuple[str, ...]
    tools: tuple[str, ...]
    pg_timeout_s: float = 60.0
    keep: str = ""
    out: str = ""

    def __post_init__(self):
        for c in self.cases:
            if c not in CASES:
                raise ValueError(f"--cases: {c!r} is not one of {','.join(CASES)}")
        for t in self.tools:
            if t not in TOOLS:
                raise ValueError(f"--tools: {t!r} is not one of {','.join(TOOLS)}")
        if self.pg_timeout_s <= 0:
            raise ValueError(f"--pg-timeout {self.pg_timeout_s}: must be above 0 seconds")


def parse_args(argv: list[str]) -> Config:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--pg-timeout", type=float, default=60.0,
                    help="seconds: torchrun's jobs pass it to init_process_group(timeout=...)")
    ap.add_argument("--keep", default="", help="a folder for each run's output, FR's dumps and fr_trace's output")
    ap.add_argument("--out", default="", help="the rows as JSON")
    ns = ap.parse_args(argv)
    return Config(cases=tuple(ns.cases.split(",")), tools=tuple(ns.tools.split(",")),
                  pg_timeout_s=ns.pg_timeout, keep=ns.keep, out=ns.out)


def command(cfg: Config, case: Case, tool: str, tmp: str) -> tuple[list[str] | None, list[str], dict]:
    """(launcher, its args, env) for one run; launcher None: xpu_timer_launch."""
    script = [os.path.join(SCRIPTS, case.script), *case.args]
    if tool == "torchrun":
        os.makedirs(os.path.join(tmp, "fr"))
        env = {"PG_TIMEOUT_S": str(cfg.pg_timeout_s), "TORCH_FR_BUFFER_SIZE": "2000",
               "TORCH_FR_DUMP_TEMP_FILE": os.path.join(tmp, "fr", FR_PREFIX)}
        return ([sys.executable, "-m", "torch.distributed.run"],
                ["--standalone", "--nproc-per-node", str(NPROC), WORKER, *script], env)
    # a port of its own: torchrun's default 29500 is taken by any other job on the host
    return None, ["--nproc-per-node", str(NPROC), "--master-port", str(free_port()),
                  "--timeline-path", os.path.join(tmp, "tl"), *script], {}


def fill_pg_config(src: str, dst: str, world: int) -> int:
    """Copies of the FR dumps in src, each with a pg_config entry for every
    group its entries name, spanning ranks 0..world-1 (true of every group
    of these scripts); returns how many it wrote."""
    os.makedirs(dst, exist_ok=True)
    n = 0
    for path in sorted(glob.glob(os.path.join(src, FR_PREFIX + "*"))):
        with open(path, "rb") as f:
            doc = pickle.load(f)
        groups = {tuple(e["process_group"]) for e in doc.get("entries", [])}
        doc["pg_config"] = {name: {"name": name, "desc": desc, "ranks": str(list(range(world)))}
                            for name, desc in groups}
        with open(os.path.join(dst, os.path.basename(path)), "wb") as f:
            pickle.dump(doc, f)
        n += 1
    return n


def _fr_rows(tmp: str, keep: str) -> list[dict]:
    """FR's dump and fr_trace's finding, as shipped, then on pg_config filled in."""
    rows = _fr_verdicts(tmp, keep, "fr", FR_PREFIX)
    dumps = sorted(glob.glob(os.path.join(tmp, "fr", FR_PREFIX + "*")))
    if not dumps:
        return rows
    # A dump names no one (a rank that left early writes one at its exit): the analyzer's
    # rows, timed by the last dump, are FR's verdicts.
    rows = [r for r in rows if r["by"] != "FR dump"]
    if fill_pg_config(os.path.join(tmp, "fr"), os.path.join(tmp, "fr-filled"), NPROC):
        rows += _fr_verdicts(tmp, keep, "fr-filled", FR_PREFIX, label=", pg_config filled",
                             times=[os.path.getmtime(d) for d in dumps])
    ranks = sorted(int(d.rsplit("_", 1)[1]) for d in dumps)
    for r in rows:
        r["line"] = f"dumps of ranks {','.join(map(str, ranks))}: {r['line']}"
    return rows


def _wait(job: Launch, tool: str, tmp: str, limit: float) -> None:
    """torchrun: until the job ends (its timeout, its root cause, the dumps);
    xpu: until hang.json is written after a HANG line, or the job ended
    (the FAILED line is in its closing summary)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and job.proc.poll() is None:
        if tool == "xpu" and job.matching(r"^HANG: ") and glob.glob(os.path.join(tmp, "tl", "*", "*", "hang.json")):
            time.sleep(1)   # its culprits are in the first write
            return
        time.sleep(0.5)
    if job.proc.poll() is not None:
        job.wait(5)


def run_one(cfg: Config, name: str, tool: str) -> dict:
    """One case under one tool: each source's first verdict after the fault."""
    case = CASES[name]
    row = {"fault": name, "tool": tool, "planted": None, "verdicts": [], "note": ""}
    tmp = tempfile.mkdtemp(prefix="deadlock-race-")
    keep = os.path.join(cfg.keep, f"{name}-{tool}") if cfg.keep else ""
    if keep:
        os.makedirs(keep, exist_ok=True)
    cmd, args, env = command(cfg, case, tool, tmp)
    job = Launch(args, env=env, command=cmd)
    try:
        got = job.wait_line(BREAK.pattern, 150)
        if not got:
            row["note"] = "no BREAK line: " + " | ".join(job.output().splitlines()[-5:])[-600:]
            return row
        m = BREAK.match(got[1])
        t0 = float(m.group(2)) if m.group(2) else got[0]
        row["planted"] = {"rank": int(m.group(1)), "time": t0}
        limit = cfg.pg_timeout_s + 60 if tool == "torchrun" else 90
        _wait(job, tool, tmp, limit)
        wanted = ("error", "root cause") if tool == "torchrun" else ("HANG", "FAILED")
        verdicts = [v for v in _verdicts_in_lines(job, tool) if v["when"] >= t0 - 1 and v["by"].startswith(wanted)]
        collect_names(verdicts, tmp)
        if tool == "torchrun":
            verdicts += _fr_rows(tmp, keep)
        for v in verdicts:
            v["after_s"] = None if v["when"] is None else round(v["when"] - t0, 1)
            v["right"] = judge(v.get("names"), case.rank)
        row["verdicts"] = sorted(verdicts, key=lambda v: (v["after_s"] is None, v["after_s"] or 0))
        if not any(v["after_s"] is not None for v in verdicts):
            row["note"] = f"none within {limit:.0f} s"
        return row
    finally:
        job.kill()
        if keep:
            with open(os.path.join(keep, "job.log"), "w") as f:
                f.write(job.output())
            for doc in glob.glob(os.path.join(tmp, "tl", "*", "*", "*.json")):
                if os.path.basename(doc) in ("hang.json", "failure.json"):
                    shutil.copy(doc, keep)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        print(f"deadlock_race: {e}", file=sys.stderr)
        return 2
    import torch
    print(f"deadlock race: torch {torch.__version__}, gloo on CPU ({os.cpu_count()} cores), {NPROC} ranks; "
          f"torchrun: init_process_group(timeout={cfg.pg_timeout_s:.0f} s), Flight Recorder dumped by "
          "bench/gloo_user_worker.py; xpu_timer_launch: default options")
    start, rows = time.monotonic(), []
    for name in cfg.cases:
        for tool in cfg.tools:
            t = time.monotonic()
            rows.append(run_one(cfg, name, tool))
            rows[-1]["run_s"] = round(time.monotonic() - t, 1)
            print(json.dumps(rows[-1]), flush=True)
    print()
    print(table(rows))
    print(f"\n(* each run's first verdict; after_s from the planted rank's BREAK line; "
          f"{time.monotonic() - start:.0f} s in all)")
    if cfg.out:
        write_atomic(cfg.out, json.dumps(rows, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
