"""Merge and render time of stack-viewer against rank count (64, 1,024, 16,384).

Synthetic but realistic input: one ``py-spy dump --native --json`` file per
rank (the collector's naming), 8 threads a rank, 60 frames a thread (Python
frames interleaved with native ones, raw addresses that differ per rank as
with ASLR), most ranks waiting in all_reduce and a few divergent groups (a
node in the data loader, one rank in a CUDA copy, a few ranks a step behind).

Each rank count runs in a fresh subprocess so its peak RSS is its own.
Phases: parse (read + parse every file), merge (group identical stacks,
build the trees), render (every format: svg, html, folded, dot, text), and
end to end = all three. Target: 16,384 ranks merged and rendered < 10 s.

    .venv/bin/python bench/viewer_scale.py [--ranks 64,1024,16384] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

THREADS = ["MainThread", "pin_memory", "loader-0", "loader-1", "loader-2", "tb-writer", "heartbeat", "ckpt"]
DEPTH = 60
LIBS = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/opt/conda/lib/libpython3.11.so.1.0"]


def _py(name, path, line):
    return {"name": name, "filename": f"/opt/conda/lib/python3.11/site-packages/{path}", "module": None,
            "short_filename": path, "line": line, "locals": None, "is_entry": False, "is_shim_entry": False}


def _native(name, lib):
    return {"name": name, "filename": lib, "module": lib, "short_filename": lib.rsplit("/", 1)[1], "line": 0,
            "locals": None, "is_entry": True, "is_shim_entry": True}


def _stack(thread: str, variant: str) -> list[dict]:
    """Innermost first, DEPTH frames: a leaf that depends on the variant, a common trunk."""
    leaves = {
        "all_reduce": [_native("__futex_abstimed_wait_common", LIBS[0]), _native("ncclCommWaitEvent", LIBS[2]),
                       _native("c10d::ProcessGroupNCCL::WorkNCCL::wait", LIBS[1]),
                       _py("wait", "torch/distributed/distributed_c10d.py", 3252),
                       _py("all_reduce", "torch/distributed/distributed_c10d.py", 3250)],
        "data": [_native("__poll", LIBS[0]), _py("_poll", "multiprocessing/connection.py", 424),
                 _py("get", "torch/utils/data/dataloader.py", 1133), _py("next_batch", "train/data.py", 88)],
        "memcpy": [_native("cuMemcpyDtoH_v2", LIBS[1]), _native("cudaMemcpy", LIBS[1]),
                   _py("item", "train/metrics.py", 41)],
        "behind": [_native("__futex_abstimed_wait_common", LIBS[0]), _native("ncclCommWaitEvent", LIBS[2]),
                   _py("all_gather", "torch/distributed/distributed_c10d.py", 3401),
                   _py("sync_metrics", "train/metrics.py", 19)],
        "idle": [_native("clock_nanosleep", LIBS[0]), _py("wait", "threading.py", 331)],
        "queue": [_native("__futex_abstimed_wait_common", LIBS[0]), _py("get", "queue.py", 180)],
    }
    leaf = leaves[variant if thread == "MainThread" else ("queue" if hash(thread) % 2 else "idle")]
    trunk = [_py(f"{thread.replace('-', '_')}_layer{i}", f"train/model_{i % 7}.py", 10 + i)
             if i % 3 else _native("_PyEval_EvalFrameDefault", LIBS[3]) for i in range(DEPTH)]
    # The trunk is cut on the leaf side, so every variant shares the root-side frames.
    return leaf + trunk[len(leaf) + 2:] + [_native("0xADDR1", LIBS[0]), _native("0xADDR2", LIBS[0])]


def _variant(rank: int, world: int) -> str:
    if world // 2 <= rank < world // 2 + 8:
        return "data"              # one node's ranks in the data loader
    if rank == world - 3:
        return "memcpy"            # one rank stuck in a device copy
    if rank % max(world // 4, 1) == 5:
        return "behind"            # a few ranks a collective behind
    return "all_reduce"


def _templates() -> dict[str, str]:
    out = {}
    for v in ("all_reduce", "data", "memcpy", "behind"):
        threads = [{"pid": "PID", "thread_id": f"TID{i}", "thread_name": t, "os_thread_id": f"TID{i}",
                    "active": False, "owns_gil": False, "frames": _stack(t, v), "process_info": None}
                   for i, t in enumerate(THREADS)]
        out[v] = re.sub(r'"(PID|TID\d)"', r"\1", json.dumps(threads, indent=2))
    return out


def make_dumps(d: Path, world: int) -> int:
    """Write one dump per rank into ``d``; returns the total bytes written."""
    tpl, total = _templates(), 0
    for r in range(world):
        text = tpl[_variant(r, world)].replace("PID", str(100000 + r))
        for i in range(len(THREADS)):
            text = text.replace(f"TID{i}", str(200000 + r * 16 + i))
        text = text.replace("0xADDR1", f"0x7f{r:08x}a1").replace("0xADDR2", f"0x7f{r:08x}b2")
        (d / f"rank{r:05d}-of-{world:05d}.py.json").write_text(text)
        total += len(text)
    return total


HOSTILE_THREADS, HOSTILE_DEPTH = 40, 60


def make_hostile(d: Path, world: int) -> int:
    """Dumps no real job makes: ``world`` ranks of 40 threads of 60 frames,
    every frame of every thread of every rank distinct, so nothing merges and
    every frame is its own narrow box (issue 45: 64 ranks, 28 MB)."""
    total = 0
    for r in range(world):
        threads = [{"pid": 100000 + r, "thread_id": 200000 + r * 64 + t, "thread_name": f"worker-{t}",
                    "os_thread_id": 200000 + r * 64 + t, "active": False, "owns_gil": False,
                    "frames": [_py(f"step_r{r}_t{t}_d{i}", f"train/r{r}/t{t}/module_{i}.py", 10 + i)
                               if i % 2 else _native(f"native_r{r}_t{t}_d{i}", f"/opt/lib/r{r}/libt{t}.so")
                               for i in range(HOSTILE_DEPTH)],
                    "process_info": None} for t in range(HOSTILE_THREADS)]
        text = json.dumps(threads, indent=2)
        (d / f"rank{r:05d}-of-{world:05d}.py.json").write_text(text)
        total += len(text)
    return total


def _cpu() -> float:
    """User + system CPU seconds of this process and its finished workers."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def one(world: int, keep: Path | None, fast: bool = True, hostile: bool = False) -> dict:
    """Measure one rank count in this process; returns the figures."""
    from viewer.parsers import pyspy_json
    from viewer.discover import scan
    from viewer.load import load
    from viewer.render import FORMATS, render

    tmp = Path(tempfile.mkdtemp(prefix=f"viewer-bench-{world}-"))
    try:
        size = make_hostile(tmp, world) if hostile else make_dumps(tmp, world)
        pyspy_json.FAST_PATH = fast
        rss0 = _rss_mb()
        c0 = _cpu()
        t0 = time.perf_counter()
        event = scan(tmp)
        loaded = load(event, os.cpu_count() or 1)  # parse + group: the merge of identical stacks happens here
        if len(loaded.ranks("py")) != world or loaded.bad_lines or loaded.notes:
            raise SystemExit(f"bench input did not parse cleanly: {loaded.notes[:2]} {loaded.bad_lines}")
        t1 = time.perf_counter()
        out = keep / str(world) if keep else tmp / "out"
        out.mkdir(parents=True, exist_ok=True)
        times = {}
        for fmt in FORMATS:
            s = time.perf_counter()
            render(event, loaded, out, {fmt})
            times[fmt] = time.perf_counter() - s
        t2 = time.perf_counter()
        kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        largest = max((f.stat().st_size for f in out.iterdir() if f.suffix == ".svg"), default=0)
        return {"start_rss_mb": rss0, "largest_svg_mb": largest / 2**20, "cpu_s": _cpu() - c0, "worker_rss_mb": kids / 1024,"ranks": world, "input_mb": size / 2**20, "parse_group_s": t1 - t0, "render_s": t2 - t1,
                "per_format_s": times, "total_s": t2 - t0,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _rss_mb() -> float:
    """This process's resident set now (the interpreter and the viewer's imports, before the input)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _run(world: int, keep: Path | None, slow: bool, hostile: bool = False) -> dict:
    """One rank count in a fresh process (its own peak RSS); prints its row."""
    cmd = [sys.executable, __file__, "--one", str(world)] + (["--keep", str(keep)] if keep else [])
    cmd += ["--slow"] if slow else []
    r = json.loads(subprocess.run(cmd + (["--hostile"] if hostile else []), capture_output=True, text=True,
                                  check=True).stdout)
    if not slow:
        per = " ".join(f"{k}={v:.2f}" for k, v in r["per_format_s"].items())
        print(f"{r['ranks']:>6} {r['input_mb']:>9.1f} {r['parse_group_s']:>14.2f} {r['render_s']:>9.2f} "
              f"{r['total_s']:>8.2f} {r['cpu_s']:>6.1f} {r['peak_rss_mb']:>12.0f} {r['worker_rss_mb']:>10.0f}  {per}",
              flush=True)
    return r


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", default="64,1024,16384")
    p.add_argument("--keep", type=Path, help="keep the rendered outputs under this directory")
    p.add_argument("--baseline", action="store_true",
                   help="also run each rank count with the py-spy JSON template fast path off")
    p.add_argument("--hostile", action="store_true",
                   help="every frame distinct (64 ranks x 40 threads x 60 frames by default): peak memory "
                        "against the input, and the largest SVG")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    p.add_argument("--slow", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(one(a.one, a.keep, fast=not a.slow, hostile=a.hostile)))
        return 0
    if a.hostile:
        for world in map(int, (a.ranks if a.ranks != "64,1024,16384" else "64").split(",")):
            r = _run(world, a.keep, slow=False, hostile=True)
            grown = r["peak_rss_mb"] - r["start_rss_mb"]
            print(f"hostile {world} ranks x {HOSTILE_THREADS} threads x {HOSTILE_DEPTH} frames, every frame "
                  f"distinct: input {r['input_mb']:.1f} MB; {r['total_s']:.1f} s; peak RSS {r['peak_rss_mb']:.0f} MB "
                  f"({r['start_rss_mb']:.0f} MB before the input: +{grown:.0f} MB = "
                  f"{grown / r['input_mb']:.1f}x the input); largest SVG {r['largest_svg_mb']:.1f} MB", flush=True)
        return 0
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    print(f"{'ranks':>6} {'input MB':>9} {'parse+group s':>14} {'render s':>9} {'total s':>8} {'CPU s':>6} "
          f"{'peak RSS MB':>12} {'child RSS':>10}  per format (s)")
    for world in map(int, a.ranks.split(",")):
        r = _run(world, a.keep, slow=False)
        if a.baseline:
            b = _run(world, None, slow=True)
            print(f"{'':>6} json only (fast path off): parse+group {b['parse_group_s']:.2f} s, "
                  f"CPU {b['cpu_s']:.1f} s -> fast path {b['cpu_s'] / max(r['cpu_s'], 1e-9):.1f}x less CPU",
                  flush=True)
        if world >= 16384:
            verdict = "meets" if r["render_s"] < 10 else "MISSES"
            print(f"16,384 ranks: merge+render {r['render_s']:.1f} s ({verdict} the 10 s target); "
                  f"end to end with parsing {r['total_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
