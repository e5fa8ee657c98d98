"""Issue 32 on GPUs: each framework's job healthy under plain torchrun and
under xpu_timer_launch (alternating, paired), then with each planted fault.

    python3 tests/gpu/scripts/fw_session.py OUT_DIR [megatron] [deepspeed] [torchtitan] [--runs N] [--cpu]

Per framework it prints and writes OUT_DIR/<framework>.json:
- healthy: each run's step median (ms, after 5 warm-up steps), the launcher's
  cost against torchrun, whether the final parameters are bitwise equal, any
  HANG/SLOW line, and /metrics' calls per step and step time against the
  script's own figures;
- each fault: the HANG line and hang.json's culprits.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)
from diag.common.net import free_port  # noqa: E402
from tests.frameworks.jobs import Scraper, rank_metrics  # noqa: E402
from tests.functional.launch import Launch  # noqa: E402

OUT = sys.argv[1]
RUNS = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 2
# --faults a,b: only these planted faults (default: each the job has); --tracer-off:
# a third healthy mode, the launcher with XPU_TIMER_TRACER_DISABLE=1 (the tracer's share)
FAULTS = sys.argv[sys.argv.index("--faults") + 1].split(",") if "--faults" in sys.argv else None
WARMUP = 5
JOBS = {
    "megatron": dict(nproc=4, script="tests/gpu/scripts/megatron_gpt.py", args=["--steps", "30"],
                     faults={"--stall-tp": 1, "--stall-pp": 2, "--skip-tp": 1}, env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
                     ab_steps="105",
                     plant=r"^PLANTED "),
    "deepspeed": dict(nproc=2, script="tests/frameworks/scripts/deepspeed_zero3.py",
                      args=["--cuda", "--steps", "60"], faults={"--stall": 1, "--skip": 1}, ab_steps="125",
                      env={"DS_ACCELERATOR": "cuda", "CUDA_VISIBLE_DEVICES": "0,1"}, plant=r"^(STALL|SKIP) "),
    # torchtitan's debug Llama, TP=2 x FSDP=2, torch.compile on: ranks 0-1 and 2-3 are tp groups
    "torchtitan": dict(nproc=4, script="tests/gpu/scripts/torchtitan_llama.py", args=["--steps", "40"],
                       faults={"--stall-tp": 1, "--stall-data": 3, "--skip-tp": 1}, env={}, plant=r"^PLANTED ",
                       ab_steps="65"),
}


if "--cpu" in sys.argv:   # a dry run of this orchestration on CPU (gloo): DeepSpeed and torchtitan
    JOBS["deepspeed"].update(args=["--steps", "60"], env={"DS_ACCELERATOR": "cpu"})
    JOBS["torchtitan"].update(args=["--cpu", "--no-compile", "--steps", "24"])


def step_figures(out_dir: str, nproc: int) -> list[dict]:
    """Per rank: sha256, step ms after warm-up, calls per step (the script's own)."""
    found = []
    for rank in range(nproc):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
            r = json.load(f)
        if "step_ms" in r:
            ms, calls = r["step_ms"][WARMUP:], r["calls"][WARMUP:]
        else:   # tests/frameworks/scripts/fwlib.py: step end times, and each collective's [start, end]
            t = r["steps"]
            ms = [(b - a) * 1e3 for a, b in zip(t[WARMUP:], t[WARMUP + 1:])]
            calls = [sum(1 for s, _ in r["comms"] if a <= s < b) for a, b in zip(t[WARMUP:], t[WARMUP + 1:])]
        row = {"sha256": r["sha256"], "step_ms": statistics.median(ms), "calls_per_step": statistics.mean(calls)}
        if any(t is not None for t in r.get("traced", [])):   # --ab: the tracer in and out by blocks
            row["ab"] = ab_figures(r)
        found.append(row)
    return found


def ab_figures(r: dict) -> dict:
    """Step medians with the tracer's wrappers in and out (tests/frameworks/scripts/tracer_ab.py)."""
    if "step_ms" in r:
        pairs = list(zip(r["traced"], r["step_ms"]))[WARMUP:]
    else:   # step i ran from the end of step i-1 to the end of step i
        t = r["steps"]
        pairs = [(r["traced"][i], (t[i] - t[i - 1]) * 1e3) for i in range(WARMUP + 1, len(t))]
    on = [ms for mode, ms in pairs if mode]
    off = [ms for mode, ms in pairs if mode is False]
    out = {"on_ms": statistics.median(on), "off_ms": statistics.median(off), "steps": [len(on), len(off)],
           "cost": statistics.median(on) / statistics.median(off) - 1}
    # The host time the tracer adds a step: per function, (traced - plain) median ns x calls per traced step.
    calls, added = r.get("ab_calls") or {}, 0.0
    for c in calls.values():
        if c["traced_ns"] is not None and c["plain_ns"] is not None and on:
            added += (c["traced_ns"] - c["plain_ns"]) * c["traced_n"] / len(on)
    if calls:
        out.update(added_us_per_step=added / 1e3, added_share=added / 1e6 / statistics.median(pairs_ms(pairs)),
                   per_call={k: v for k, v in calls.items()})
    return out


def pairs_ms(pairs) -> list:
    return [ms for _, ms in pairs]


def run_job(job: dict, mode: str, out_dir: str) -> dict:
    env = dict(os.environ, PYTHONWARNINGS="ignore", **job["env"])
    cmd_tail = ["--nproc-per-node", str(job["nproc"]), "--master-port", str(free_port()), job["script"], out_dir,
                *job["args"]]
    t0 = time.monotonic()
    if mode == "launcher, tracer off":
        env["XPU_TIMER_TRACER_DISABLE"] = "1"
    if mode == "launcher A/B":   # the tracer in and out by blocks of steps, inside the job
        args = list(job["args"])
        if "--steps" in args:
            args[args.index("--steps") + 1] = job["ab_steps"]
        cmd_tail = cmd_tail[:-len(job["args"])] + args + ["--ab"] if job["args"] else cmd_tail + ["--ab"]
    if mode == "torchrun":
        for key in [k for k in env if k.startswith("XPU_TIMER_")]:
            del env[key]
        p = subprocess.run([sys.executable, "-m", "torch.distributed.run", *cmd_tail], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=400)
        ok, output, scrapes = p.returncode == 0, p.stdout + p.stderr, []
    else:
        port = free_port()
        launch = Launch(["--metrics-port", str(port), "--metrics-addr", "127.0.0.1", "--perf-window", "2s",
                         "--timeline-path", os.path.join(out_dir, "timeline"), "--hang-timeout", "60s", *cmd_tail],
                        env={k: v for k, v in env.items() if k in job["env"] or k == "XPU_TIMER_TRACER_DISABLE"})
        scraper = Scraper(f"http://127.0.0.1:{port}/metrics", interval=0.5)
        try:
            code = launch.wait(400)
        finally:
            scrapes = scraper.stop() if hasattr(scraper, "stop") else scraper.scrapes
            launch.kill()
        ok, output = code == 0, launch.output()
    result = {"mode": mode, "ok": ok, "wall_s": round(time.monotonic() - t0, 1),
              "alarms": [line for line in output.splitlines() if re.search(r"\b(HANG|SLOW|SILENT):", line)]}
    if not ok:
        result["tail"] = output[-3000:]
        return result
    result["ranks"] = step_figures(out_dir, job["nproc"])
    if scrapes:
        result["metrics"] = metrics_against_script(scrapes, result["ranks"])
    return result


def metrics_against_script(scrapes, ranks) -> list[dict]:
    """Per rank: calls per step and step time from /metrics (between the
    first and last scrape that saw steady steps) against the script's."""
    rows = []
    for rank, truth in enumerate(ranks):
        seen = [m for m in (rank_metrics(s, rank) for s in scrapes)
                if m is not None and m.steps_total >= WARMUP + 2]   # past set-up and warm-up
        if len(seen) < 3:
            rows.append({"rank": rank, "scrapes": len(seen)})
            continue
        first, last = seen[1], seen[-1]
        steps = last.steps_total - first.steps_total
        calls = (last.calls_total - first.calls_total) / steps if steps else None
        rows.append({"rank": rank, "metrics_calls_per_step": calls, "script_calls_per_step": truth["calls_per_step"],
                     "metrics_step_ms": last.step_s * 1e3, "script_step_ms": truth["step_ms"],
                     "calls_within_10pct": calls is not None and abs(calls / truth["calls_per_step"] - 1) <= 0.10,
                     "step_within_25pct": abs(last.step_s * 1e3 / truth["step_ms"] - 1) <= 0.25})
    return rows


def fault(job: dict, flag: str, out_dir: str) -> dict:
    tl = os.path.join(out_dir, "timeline")
    launch = Launch(["--timeline-path", tl, "--hang-timeout", "20s", "--nproc-per-node", str(job["nproc"]),
                     "--master-port", str(free_port()), job["script"], out_dir, *job["args"], flag],
                    env=dict(job["env"], XPU_TIMER_DUMP_TOOLS="py-spy"))
    try:
        planted = launch.wait_line(job["plant"], 300)
        hang = launch.wait_line(r"HANG: ", 120) if planted else None
        stacks = launch.wait_line(r"^STACKS: ", 120) if hang else None
        doc = None
        if stacks:
            event = stacks[1].rsplit("stack-viewer --path ", 1)[1]
            for _ in range(40):
                path = os.path.join(event, "hang.json")
                if os.path.exists(path):
                    with open(path) as f:
                        doc = json.load(f)
                    break
                time.sleep(0.5)
        return {"flag": flag, "planted": planted[1] if planted else None,
                "hang": hang[1][hang[1].index("HANG: "):] if hang else None,
                "seconds_to_hang": round(hang[0] - planted[0], 1) if hang and planted else None,
                "culprits": doc.get("culprits") if doc else None, "expected_culprit": job["faults"][flag],
                "tail": None if hang else launch.output()[-3000:]}
    finally:
        launch.kill()
        subprocess.run(["pkill", "-9", "-f", job["script"]], check=False)


def main() -> None:
    names = [n for n in JOBS if n in sys.argv[2:]] or list(JOBS)
    os.makedirs(OUT, exist_ok=True)
    for name in names:
        job = JOBS[name]
        report = {"healthy": [], "faults": []}
        modes = ["torchrun", "launcher"] + (["launcher, tracer off"] if "--tracer-off" in sys.argv else []) \
            + (["launcher A/B"] if "--ab" in sys.argv else [])
        if "--only-ab" in sys.argv:
            modes = ["launcher A/B"]
        order = [m for i in range(RUNS) for m in (modes if i % 2 == 0 else modes[::-1])]
        for i, mode in enumerate(order):
            r = run_job(job, mode, os.path.join(OUT, name, f"healthy{i}-{mode}"))
            report["healthy"].append(r)
            med = statistics.median(x["step_ms"] for x in r["ranks"]) if r.get("ranks") else None
            print(f"{name} {mode}: ok {r['ok']}, step median {med} ms, alarms {r['alarms']}", flush=True)
            if not r["ok"]:
                print(r["tail"], flush=True)
        good = [r for r in report["healthy"] if r.get("ranks")]
        # The A/B runs train longer (more steps): not compared bitwise.
        shas = {tuple(x["sha256"] for x in r["ranks"]) for r in good if r["mode"] != "launcher A/B"}
        by = {m: [statistics.median(x["step_ms"] for x in r["ranks"]) for r in good if r["mode"] == m]
              for m in modes if m != "launcher A/B"}
        if by.get("torchrun") and by.get("launcher"):
            base = statistics.median(by["torchrun"])
            costs = {m: round(statistics.median(v) / base - 1, 4) for m, v in by.items() if v}
            report["summary"] = {"bitwise_equal": len(shas) == 1, "step_ms": by, "cost_against_torchrun": costs}
            print(f"{name}: bitwise equal {len(shas) == 1}; step ms {by}; against torchrun {costs}", flush=True)
        ab = [x["ab"]["cost"] for r in good for x in r["ranks"] if "ab" in x]
        if ab:
            report.setdefault("summary", {})["tracer_ab_cost"] = {"per_rank_run": ab, "median": statistics.median(ab)}
            print(f"{name}: tracer in/out inside the job, step-time cost per rank and run {[round(c, 4) for c in ab]}, "
                  f"median {statistics.median(ab):+.4f}", flush=True)
        added = [x["ab"]["added_share"] for r in good for x in r["ranks"] if "added_share" in x.get("ab", {})]
        if added:
            report["summary"]["tracer_added_host_share"] = added
            print(f"{name}: host time the tracer adds a step, per rank and run "
                  f"{[f'{a * 100:.2f}%' for a in added]} of the step median", flush=True)
        for r in good:
            for row in r.get("metrics", []):
                print(f"{name} metrics {row}", flush=True)
        for flag in [f for f in job["faults"] if FAULTS is None or f in FAULTS]:
            f = fault(job, flag, os.path.join(OUT, name, f"fault{flag}"))
            report["faults"].append(f)
            print(f"{name} {flag}: culprits {f['culprits']} (expected [{f['expected_culprit']}]), "
                  f"{f['seconds_to_hang']} s after planting\n  {f['hang']}", flush=True)
            if f["tail"]:
                print(f["tail"], flush=True)
        with open(os.path.join(OUT, f"{name}.json"), "w") as fh:
            json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
