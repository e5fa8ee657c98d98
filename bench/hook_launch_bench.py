"""Per-call cost of the kernel hook on a real GPU, measured side by side.

    python3 bench/hook_launch_bench.py [--launches 1000000] [--timed 100000] [--rounds 5]
                                       [--out FILE.json]

Builds bench/hook_launch_bench.cu with nvcc (-cudart shared) against the CUDA,
cuBLAS and NCCL libraries torch uses (the nvidia-* wheels), then runs it in
four variants, interleaved round by round (plain launches through the runtime
and through the driver's entry point, as cuBLAS and NCCL launch; cuBLAS
GEMMs; NCCL all-reduces): without the hook, with it
(LD_PRELOAD, XPU_TIMER_SHM_DIR set: counting and timing on, the default
sampling: 1 in 8 GEMMs/collectives device-timed with two events, the other
collectives one end event, the other GEMMs none), with it switched off
(XPU_TIMER_HOOK_DISABLE=1), with every call device-timed
(XPU_TIMER_HOOK_TIME_EVERY=1, two events per call), and with completion
tracked by an end event at launch (XPU_TIMER_HOOK_COMPLETION=event) instead of
the drainer's fences. Each run is pinned to the same two cores. Prints the
median ns per call of each, and the ns the hook adds per plain launch and per
GEMM / NCCL call (averaged over sampled and unsampled calls, which is what a
training step pays). Then, paired inside one hooked process (blocks through the
hook and straight to the library, alternating: no run-to-run spread), the ns
the hook adds per plain launch and per GEMM / NCCL call, for the default and
the event mode, and bypassed (xpu_timer_hook_bypass: its bare forwarding cost,
what bench/hook_step_overhead.py's in-process pairs do not see).
Targets: < 100 ns per plain launch, < 1.5 us per timed call.
Without nvcc or a GPU it says so on one line and exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from diag.common.atomic import write_atomic  # noqa: E402
HOOK = os.path.join(ROOT, "diag", "lib", "libxpu_timer_hook.so")
SRC = os.path.join(ROOT, "bench", "hook_launch_bench.cu")
VARIANTS = ("off", "hook", "hook-event", "disabled", "hook-every1")
PAIRED_VARIANTS = ("hook", "hook-event", "bypass")
TARGET_NS = {"launch": 100.0, "driver": 100.0, "gemm": 1500.0, "nccl": 1500.0}
PAIRED_MODES = ("launch", "gemm", "nccl")   # "driver": no unwrapped entry point to pair with
PLAIN_LAUNCHES = ("launch", "driver")       # record no events: no event variants


@dataclasses.dataclass(frozen=True)
class Config:
    launches: int = 1_000_000
    timed: int = 100_000
    rounds: int = 5
    out: str | None = None

    def __post_init__(self):
        for name in ("launches", "timed", "rounds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be positive, got {getattr(self, name)}")


def parse_args(argv: list[str]) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launches", type=int, default=1_000_000)
    p.add_argument("--timed", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out")
    a = p.parse_args(argv)
    try:
        return Config(a.launches, a.timed, a.rounds, a.out)
    except ValueError as exc:
        p.error(str(exc))


def wheel_lib_dir(soname: str) -> str | None:
    """The directory of soname inside the nvidia-* wheels next to torch."""
    import torch
    site = os.path.dirname(os.path.dirname(torch.__file__))
    hits = glob.glob(os.path.join(site, "nvidia", "**", soname), recursive=True)
    return os.path.dirname(hits[0]) if hits else None


def build(workdir: str) -> str:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    dirs = [wheel_lib_dir(s) for s in ("libcudart.so.13", "libcublas.so.13", "libnccl.so.2")]
    if None in dirs:
        raise RuntimeError(f"CUDA/cuBLAS/NCCL wheel libraries not found next to torch: {dirs}")
    exe = os.path.join(workdir, "hook_launch_bench")
    cmd = [nvcc, "-O2", "-std=c++17", "-cudart", "shared", "-o", exe, SRC,
           f"-L{dirs[1]}", "-l:libcublas.so.13", f"-L{dirs[2]}", "-l:libnccl.so.2"]
    for d in dict.fromkeys(dirs):  # the wheels' libcudart first, as in torch
        cmd += ["-Xlinker", f"-rpath={d}"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"nvcc failed: {out.stderr.strip()[-2000:]}")
    return exe


def pin() -> None:
    """Two fixed cores (host loop + the hook's drainer): less run-to-run spread."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 4:
        os.sched_setaffinity(0, set(cores[2:4]))


def run_one(exe: str, mode: str, n: int, variant: str, shm: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPU_TIMER_")}
    env.pop("LD_PRELOAD", None)
    if variant != "off":
        env["LD_PRELOAD"] = HOOK
        env["XPU_TIMER_SHM_DIR"] = shm
    if variant == "disabled":
        env["XPU_TIMER_HOOK_DISABLE"] = "1"
    if variant == "hook-every1":  # every call device-timed: two events each
        env["XPU_TIMER_HOOK_TIME_EVERY"] = "1"
    if variant == "hook-event":
        env["XPU_TIMER_HOOK_COMPLETION"] = "event"
    if variant == "bypass":
        env["HOOK_BENCH_BYPASS"] = "1"
    out = subprocess.run([exe, mode, str(n)], env=env, capture_output=True, text=True,
                         timeout=600, preexec_fn=pin)
    if out.returncode != 0 or out.stderr.strip():
        raise RuntimeError(f"{mode}/{variant}: rc {out.returncode}: {out.stderr.strip()}")
    return float(out.stdout.split()[-1])


def measure_paired(cfg: Config, exe: str) -> dict:
    """{(mode, variant): [added ns per call, one per round]} from the paired modes."""
    samples = {(m, v): [] for m in PAIRED_MODES for v in PAIRED_VARIANTS
               if m != "launch" or v != "hook-event"}  # launches record no events
    with tempfile.TemporaryDirectory(prefix="hook-bench-") as shm:
        for _ in range(cfg.rounds):
            for mode, variant in samples:
                n = cfg.launches if mode in PLAIN_LAUNCHES else cfg.timed
                samples[(mode, variant)].append(run_one(exe, f"{mode}-paired", n, variant, shm))
                for f in glob.glob(os.path.join(shm, "*.ring")):
                    os.unlink(f)
    return samples


def report_paired(samples: dict) -> dict:
    print("\npaired in one process (median over rounds of the per-block median):")
    result = {}
    for (mode, variant), xs in samples.items():
        med = statistics.median(xs)
        mark = "ok" if med < TARGET_NS[mode] else f"OVER target {TARGET_NS[mode]:.0f}"
        if variant == "bypass":
            mark = "(forwarding only)"
        print(f"{mode:8} {variant:10} added {med:+8.1f} ns per call "
              f"(rounds {min(xs):+.1f} .. {max(xs):+.1f}) {mark}")
        result[f"{mode}/{variant}/paired"] = {"added_ns": med, "samples": xs}
    return result


def measure(cfg: Config, exe: str) -> dict:
    samples = {(m, v): [] for m in TARGET_NS for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="hook-bench-") as shm:
        for _ in range(cfg.rounds):
            for mode in TARGET_NS:
                n = cfg.launches if mode in PLAIN_LAUNCHES else cfg.timed
                for variant in VARIANTS:
                    if variant.startswith("hook-") and mode in PLAIN_LAUNCHES:
                        continue  # plain launches record no events either way
                    samples[(mode, variant)].append(run_one(exe, mode, n, variant, shm))
                    for f in glob.glob(os.path.join(shm, "*.ring")):
                        os.unlink(f)
    return samples


def report(samples: dict) -> dict:
    result = {}
    print(f"{'call':8} {'variant':9} {'median ns':>10} {'min':>9} {'max':>9}  added vs off")
    for mode in TARGET_NS:
        base = statistics.median(samples[(mode, "off")])
        for v in VARIANTS:
            xs = samples[(mode, v)]
            if not xs:
                continue
            med = statistics.median(xs)
            added = med - base
            mark = ""
            if v in PAIRED_VARIANTS:
                mark = "ok" if added < TARGET_NS[mode] else f"OVER target {TARGET_NS[mode]:.0f}"
            print(f"{mode:8} {v:9} {med:10.1f} {min(xs):9.1f} {max(xs):9.1f}  "
                  f"{added:+8.1f} ns {mark}")
            result[f"{mode}/{v}"] = {"median_ns": med, "samples": xs, "added_ns": added}
    return result


def main(argv=None) -> int:
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch
        if not torch.cuda.is_available():
            print("hook_launch_bench: skipped: no CUDA GPU here (CPU figures: "
                  "bench/hook_cpu_bench.py)")
            return 0
    except ImportError:
        print("hook_launch_bench: skipped: torch is not installed")
        return 0
    if not os.path.exists(HOOK):
        print(f"hook_launch_bench: {HOOK} is missing; run make -C kernel_hook")
        return 2
    with tempfile.TemporaryDirectory(prefix="hook-bench-build-") as work:
        exe = build(work)
        prims = subprocess.run([exe, "prims", "200000"], capture_output=True, text=True,
                               timeout=300, preexec_fn=pin).stdout
        print("runtime calls on the timed path, alone (ns per call):")
        print("".join("  " + line + "\n" for line in prims.splitlines()))
        result = report(measure(cfg, exe))
        result.update(report_paired(measure_paired(cfg, exe)))
        result["prims"] = prims
    if cfg.out:
        doc = {"config": dataclasses.asdict(cfg), "device": torch.cuda.get_device_name(),
               "result": result}
        write_atomic(cfg.out, json.dumps(doc, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
