"""xpu-diag's recovery and DLRover's Flash Checkpoint on the same CPU DDP job, in one run (issue 42 item 5).

The job (bench/recover_vs_dlrover/job.py): 2 gloo ranks, an MLP with AdamW, an in-memory checkpoint
after every step; rank 1 is SIGKILLed before step --kill-at and the launcher restarts the workers once.
For each tool: the training thread's time blocked per save (median and p90 over every step of
rank 0, which holds the DDP state in both tools: the save call, plus xpu-diag's optimizer pre-hook
wait), the time from the kill to the first step after the restart, and the steps lost.

xpu-diag runs under ``xpu_timer_launch --hang-action recover --max-restarts 1``. DLRover is tried
first under its own launcher (``dlrover-run --standalone``); where that fails its error is printed
and its Flash Checkpoint runs under ``torchrun --max-restarts 1`` (c10d rendezvous with a fresh
store per round, as xpu-diag's launcher sets up), the way DLRover's engine.py documents it for jobs
not started by dlrover-run. dlrover is not a project dependency: ``pip install --no-deps
dlrover==0.6.1 deprecated requests`` into the venv first.

    .venv/bin/python bench/recover_vs_dlrover.py [--steps 60 --kill-at 40 --hidden 512]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "bench", "recover_vs_dlrover", "job.py")
BIN = os.path.dirname(sys.executable)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--kill-at", type=int, default=40)
    p.add_argument("--hidden", type=int, default=512, help="MLP width (state = ~hidden^2 x 12 bytes with AdamW)")
    p.add_argument("--timeout", type=float, default=300)
    args = p.parse_args(argv)
    if not 0 < args.kill_at < args.steps:
        p.error(f"--kill-at {args.kill_at}: must be between 1 and --steps - 1 ({args.steps - 1})")
    return args


def run(cmd, env, timeout) -> tuple[int, str, str]:
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        return 124, exc.stdout.decode() if exc.stdout else "", exc.stderr.decode() if exc.stderr else ""


def figures(out: str, kill_at: int) -> dict:
    saves = [float(m.group(1)) + float(m.group(2)) for m in
             re.finditer(r"^SAVE rank=0 step=\d+ call=([\d.]+) prehook=([\d.]+)$", out, re.M)]
    kill = re.search(r"^KILL t=([\d.]+)$", out, re.M)
    after = [float(t) for t in re.findall(r"^STEP rank=\d+ restart=1 step=\d+ t=([\d.]+)$", out, re.M)]
    restored = re.search(r"^RESTORED rank=0 restart=1 step=(\d+)", out, re.M)
    saves.sort()
    return {"blocked_ms": statistics.median(saves) * 1e3 if saves else None,
            "blocked_p90_ms": saves[int(len(saves) * 0.9)] * 1e3 if saves else None,
            "kill_to_step_s": min(after) - float(kill.group(1)) if kill and after else None,
            "lost": kill_at - int(restored.group(1)) if restored else None,
            "restored": int(restored.group(1)) if restored else None}


def main(argv=None) -> int:
    args = parse_args(argv)
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    tmp = tempfile.mkdtemp(prefix="recover-vs-dlrover-")
    job = [JOB, None, str(args.steps), str(args.kill_at), None, str(args.hidden)]
    rows = {}
    try:
        cmd = [os.path.join(BIN, "xpu_timer_launch"), "--nproc-per-node", "2", "--hang-action", "recover",
               "--max-restarts", "1", "--timeline-path", os.path.join(tmp, "tl"), "--rdzv-id", f"vs-{os.getpid()}",
               JOB, "xpu", *job[2:4], os.path.join(tmp, "xpu"), job[5]]
        code, out, err = run(cmd, env, args.timeout)
        rows["xpu-diag (xpu_timer_launch --hang-action recover)"] = (code, figures(out, args.kill_at), err)
        ck = os.path.join(tmp, "dlrover")
        cmd = [os.path.join(BIN, "dlrover-run"), "--standalone", "--nproc_per_node", "2", "--max-restarts", "1",
               JOB, "dlrover", *job[2:4], ck, job[5]]
        code, out, err = run(cmd, env, args.timeout)
        launcher = "dlrover-run --standalone"
        if code != 0 or "RESTORED" not in out:
            why = [line for line in err.splitlines() if re.search(r"Error|error:", line)]
            print(f"dlrover-run --standalone failed (exit {code}): {why[-1].strip() if why else err[-300:]}")
            shutil.rmtree(ck, ignore_errors=True)
            port = subprocess.check_output([sys.executable, "-c", "from diag.common.net import free_port; "
                                            "print(free_port())"], cwd=ROOT, text=True).strip()
            cmd = [os.path.join(BIN, "torchrun"), "--nproc-per-node", "2", "--max-restarts", "1", "--rdzv-backend",
                   "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", JOB, "dlrover", *job[2:4], ck, job[5]]
            code, out, err = run(cmd, dict(env, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"), args.timeout)
            launcher = "torchrun --max-restarts 1"
        rows[f"DLRover 0.6.1 Flash Checkpoint ({launcher})"] = (code, figures(out, args.kill_at), err)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    h = args.hidden
    state_mib = (65 * h + h * h + h + h + 1) * 4 * 3 / 2 ** 20     # parameters and two AdamW moments, fp32
    print(f"job: 2 gloo ranks, DDP MLP width {args.hidden} ({state_mib:.1f} MiB of parameters + AdamW state), "
          f"a memory checkpoint every step, rank 1 SIGKILLed before step {args.kill_at} of {args.steps}")
    print(f"| tool | exit | blocked per save, median (p90) | kill -> first step after restart | steps lost |")
    print("|---|---|---|---|---|")
    for name, (code, f, _) in rows.items():
        blocked = f"{f['blocked_ms']:.2f} ms ({f['blocked_p90_ms']:.2f})" if f["blocked_ms"] is not None else "-"
        to_step = f"{f['kill_to_step_s']:.1f} s" if f["kill_to_step_s"] is not None else "-"
        lost = f"{f['lost']} (restored step {f['restored']})" if f["lost"] is not None else "-"
        print(f"| {name} | {code} | {blocked} | {to_step} | {lost} |")
    return 0 if all(code == 0 for code, _, _ in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
