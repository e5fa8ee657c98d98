"""``make demo``: watch a 4-rank job hang, get caught and get explained.

Runs examples/train_stall.py under xpu_timer_launch with the default
options but ``--blocked-after 10s`` (30 s by default). Rank 2 stalls in
``load_next_batch`` (a sleep: no CPU, no I/O) while ranks 0, 1 and 3 wait in
all_reduce, which the ``blocked`` rule proves long before --hang-timeout's
300 s; the collector prints the HANG line and every rank's stacks land in
the timeline directory. The stall ends on its own, so the job then finishes.
If stack-viewer is installed, the demo renders the flame graphs too.

Exit status: 0 once the hang was caught with stacks from all 4 ranks;
1 if not (the reason is printed).

    python examples/demo.py [--timeline-path DIR] [--blocked-after 10s]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NPROC = 4


def launcher_argv() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "xpu_timer_launch")
    return [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "diag.launcher.main"]


def viewer_argv() -> list[str] | None:
    if not os.path.exists(os.path.join(ROOT, "viewer", "cli.py")):
        return None
    exe = os.path.join(os.path.dirname(sys.executable), "stack-viewer")
    return [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "viewer"]


def say(text: str) -> None:
    print(f"\n=== demo: {text}", flush=True)


def run_job(args) -> int:
    argv = launcher_argv() + [
        "--nproc-per-node", str(NPROC), "--blocked-after", args.blocked_after,
        "--timeline-path", args.timeline_path, "--rdzv-id", "demo",
        os.path.join(HERE, "train_stall.py"), "--stall-rank", "2",
        "--stall-seconds", str(args.stall_seconds)]
    say("running " + " ".join(argv[len(launcher_argv()):]))
    say("rank 2 will stall in load_next_batch(); the others wait in all_reduce")
    # OMP_NUM_THREADS set: torchrun then skips its banner about setting it.
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run(argv, cwd=ROOT, env=env, timeout=args.stall_seconds + 240).returncode


def show_event(timeline: str) -> str | None:
    """Print what was found; return the event directory, or None if no hang was caught."""
    events = sorted(glob.glob(os.path.join(timeline, "demo", "*", "hang.json")))
    if not events:
        return None
    event_dir = os.path.dirname(events[-1])
    with open(events[-1]) as f:
        hang = json.load(f)
    say("the collector's verdict (hang.json)")
    print(hang.get("verdict", "?"))
    say(f"stack files in {event_dir}")
    for name in sorted(os.listdir(event_dir)):
        print(f"  {name:40s} {os.path.getsize(os.path.join(event_dir, name)):>9,d} bytes")
    for path in sorted(glob.glob(os.path.join(event_dir, "rank*.py.json"))):
        print(f"  {os.path.basename(path)[:18]}: {innermost_python(path)}")
    show_timeline(os.path.join(event_dir, "timeline.json"))
    return event_dir


def show_timeline(path: str) -> None:
    """One line about the merged timeline (docs/timeline.md), if it is there."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError):
        return
    spans = [e for e in events if e.get("ph") == "X"]
    ranks = sorted({e["pid"] - 1 for e in spans})
    say(f"timeline.json: {len(spans)} spans of ranks {ranks}, the last 30 s before the hang; "
        f"open it in https://ui.perfetto.dev or chrome://tracing")


def innermost_python(path: str) -> str:
    """The innermost Python frames of the main thread, for a one-line summary;
    xpu-diag's own (the tracer's wrapper between train.py and torch) left out."""
    try:
        with open(path) as f:
            threads = json.load(f)
        frames = next((t["frames"] for t in threads if t.get("thread_name") == "MainThread"),
                      threads[0]["frames"])
        names = [fr["name"] for fr in frames
                 if fr.get("filename", "").endswith(".py") and not ours(fr["filename"])]
        return " <- ".join(names[:4]) or "(no Python frames)"
    except (OSError, ValueError, KeyError, IndexError, StopIteration) as exc:
        return f"(unreadable: {exc})"


def ours(filename: str) -> bool:
    """A file of xpu-diag's package, wherever the rank had it: the part from
    its last ``diag/`` is a file of this checkout's diag/."""
    _, sep, rel = filename.replace(os.sep, "/").rpartition("/diag/")
    return bool(sep) and os.path.isfile(os.path.join(ROOT, "diag", rel))


def ranks_with_stacks(event_dir: str) -> set[int]:
    return {int(os.path.basename(p)[4:9]) for p in glob.glob(os.path.join(event_dir, "rank*.py.json"))}


def render(timeline: str) -> None:
    argv = viewer_argv()
    if argv is None:
        say("stack-viewer is not installed here; skipping the flame graphs")
        return
    say("rendering flame graphs with stack-viewer")
    proc = subprocess.run(argv + ["--path", timeline], cwd=ROOT, timeout=300)
    if proc.returncode == 0:
        svgs = sorted(glob.glob(os.path.join(timeline, "**", "*.svg"), recursive=True))
        for svg in svgs:
            print(f"  {svg}")
    else:
        print(f"  stack-viewer exited {proc.returncode}; the stack files above are still complete")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="xpu-diag demo: a stalled rank, caught")
    p.add_argument("--timeline-path", default=os.path.join(ROOT, "out", "demo-timeline"))
    p.add_argument("--blocked-after", default="10s")
    p.add_argument("--stall-seconds", type=float, default=30.0)
    args = p.parse_args(argv)
    shutil.rmtree(os.path.join(args.timeline_path, "demo"), ignore_errors=True)
    os.makedirs(args.timeline_path, exist_ok=True)
    status = run_job(args)
    say(f"the training job exited with status {status}")
    event_dir = show_event(args.timeline_path)
    if event_dir is None:
        print("demo FAILED: no hang was caught (no hang.json under "
              f"{args.timeline_path}/demo)", file=sys.stderr)
        return 1
    missing = set(range(NPROC)) - ranks_with_stacks(event_dir)
    if missing:
        print(f"demo FAILED: no py-spy stacks for ranks {sorted(missing)} in {event_dir}",
              file=sys.stderr)
        return 1
    render(args.timeline_path)
    say(f"done: the hang was caught and explained; everything is under {args.timeline_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
