"""Per-call cost of the kernel hook on CPU, against the fake CUDA runtime.

    python3 bench/hook_cpu_bench.py [--launches 2000000] [--rounds 5] [--no-callgrind]
                                    [--before REV]

Runs tests/kernel_hook's hookprog in bench mode (FAKE_CUDA_INLINE=1: the fake
"device" runs each call at once, so the baseline is tiny) without the hook,
with it, and with it switched off, interleaved round by round; prints the
median ns per plain launch (cudaLaunchKernel, which the fake runtime hands on
to the driver as the real one does), per timed GEMM call (its kernel launched
through the driver inside it) and per launch through the driver entry point
that cuGetProcAddress hands out (how cuBLAS and NCCL launch), and what the
hook adds. --before REV adds the hook built from git revision REV (its
kernel_hook/ alone, into a temporary directory) as one more variant, on the
same fakes: the paired figure for a change of the hot path. Then the same with
valgrind --tool=callgrind, counting instructions in the loops only
(--toggle-collect): the marginal instructions per call, from two loop lengths,
which are the same from run to run (wall times on a loaded machine are not).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK = os.path.join(ROOT, "diag", "lib", "libxpu_timer_hook.so")
TESTS = os.path.join(ROOT, "tests", "kernel_hook")
HOOKPROG = os.path.join(TESTS, "build", "progs", "hookprog")
VARIANTS = ("off", "hook", "disabled")
CALLS = (("launch", "bench_launch_loop", 1), ("gemm", "bench_gemm_loop", 10),
         ("driver", "bench_driver_loop", 1))   # name, loop, calls per launch count


@dataclasses.dataclass(frozen=True)
class Config:
    launches: int = 2_000_000
    rounds: int = 5
    callgrind: bool = True
    before: str | None = None

    def __post_init__(self):
        if self.launches < 1000 or self.rounds <= 0:
            raise ValueError(f"--launches must be >= 1000 and --rounds > 0 "
                             f"(got {self.launches}, {self.rounds})")


def parse_args(argv: list[str]) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launches", type=int, default=2_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-callgrind", dest="callgrind", action="store_false")
    p.add_argument("--before", metavar="REV", help="also the hook of this git revision")
    a = p.parse_args(argv)
    try:
        return Config(a.launches, a.rounds, a.callgrind, a.before)
    except ValueError as exc:
        p.error(str(exc))


def build_before(rev: str, into: str) -> str:
    """The hook of git revision rev, built from its kernel_hook/ in ``into``."""
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "kernel_hook"],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"--before {rev}: git archive failed: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
    lib = os.path.join(into, "lib")
    subprocess.run(["make", "-s", "-C", os.path.join(into, "kernel_hook"), f"OUT_DIR={lib}"],
                   check=True)
    return os.path.join(lib, "libxpu_timer_hook.so")


LIBS = {"hook": HOOK, "disabled": HOOK}   # "before": set by main when asked


def env_for(variant: str, shm: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XPU_TIMER_", "FAKE_"))}
    env.pop("LD_PRELOAD", None)
    env["FAKE_CUDA_INLINE"] = "1"
    if variant != "off":
        env.update(LD_PRELOAD=LIBS[variant], XPU_TIMER_SHM_DIR=shm)
    if variant == "disabled":
        env["XPU_TIMER_HOOK_DISABLE"] = "1"
    return env


def run(cmd: list[str], variant: str, shm: str) -> str:
    out = subprocess.run(cmd, env=env_for(variant, shm), capture_output=True, text=True,
                         timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ({variant}): {out.stderr.strip()[-1500:]}")
    for f in os.listdir(shm):
        os.unlink(os.path.join(shm, f))
    return out.stdout


def wall(cfg: Config, shm: str, variants: tuple) -> dict:
    samples = {(c[0], v): [] for c in CALLS for v in variants}
    for _ in range(cfg.rounds):
        for v in variants:
            fields = run([HOOKPROG, "bench", str(cfg.launches)], v, shm).split()
            for i, (call, _loop, _div) in enumerate(CALLS):
                samples[(call, v)].append(float(fields[2 * i + 1]))
    return {k: statistics.median(xs) for k, xs in samples.items()}


def instructions(loop: str, n: int, variant: str, shm: str) -> int:
    """Instructions executed inside loop (and its callees), main thread only."""
    with tempfile.NamedTemporaryFile(suffix=".cg") as cg:
        run(["valgrind", "--tool=callgrind", f"--toggle-collect={loop}",
             f"--callgrind-out-file={cg.name}", HOOKPROG, "bench", str(n)], variant, shm)
        text = open(cg.name).read()
    return int(re.search(r"^(?:totals|summary): (\d+)", text, re.M).group(1))


def callgrind(shm: str, variants: tuple) -> dict:
    out = {}
    n1, n2 = 20_000, 120_000  # launches; the GEMM loop runs a tenth as many
    for call, loop, div in CALLS:
        for v in variants:
            delta = instructions(loop, n2, v, shm) - instructions(loop, n1, v, shm)
            out[(call, v)] = delta / ((n2 - n1) / div)
    return out


def show(title: str, figures: dict, unit: str, variants: tuple) -> None:
    print(title)
    for call, _loop, _div in CALLS:
        base = figures[(call, "off")]
        cells = "  ".join(f"{v} {figures[(call, v)]:8.1f}" for v in variants)
        adds = f"hook adds {figures[(call, 'hook')] - base:+.1f}"
        if "before" in variants:
            adds += (f" (before: {figures[(call, 'before')] - base:+.1f}; the change: "
                     f"{figures[(call, 'hook')] - figures[(call, 'before')]:+.1f})")
        print(f"  {call:6} {unit} per call: {cells}   {adds}")


def main(argv=None) -> int:
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    for d in ("kernel_hook", "tests/kernel_hook"):
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, d)], check=True)
    with tempfile.TemporaryDirectory(prefix="hook-cpu-bench-") as shm, \
            tempfile.TemporaryDirectory(prefix="hook-before-") as before:
        variants = VARIANTS
        if cfg.before:
            LIBS["before"] = build_before(cfg.before, before)
            variants = VARIANTS + ("before",)
            print(f"before: the hook of {cfg.before}, on the same fakes")
        show(f"wall time, median of {cfg.rounds} interleaved rounds ({cfg.launches} launches, "
             f"{cfg.launches // 10} GEMMs, {cfg.launches} driver launches each):",
             wall(cfg, shm, variants), "ns", variants)
        if cfg.callgrind and shutil.which("valgrind"):
            show("callgrind, marginal instructions (each loop only):",
                 callgrind(shm, variants), "Ir", variants)
        elif cfg.callgrind:
            print("callgrind: skipped: valgrind is not installed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
