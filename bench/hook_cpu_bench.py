"""Per-call cost of the kernel hook on CPU, against the fake CUDA runtime.

    python3 bench/hook_cpu_bench.py [--launches 2000000] [--rounds 5] [--no-callgrind]

Runs tests/kernel_hook's hookprog in bench mode (FAKE_CUDA_INLINE=1: the fake
"device" runs each call at once, so the baseline is tiny) without the hook,
with it, and with it switched off, interleaved round by round; prints the
median ns per plain launch and per timed GEMM call and what the hook adds.
Then the same with valgrind --tool=callgrind, counting instructions in the
launch and GEMM loops only (--toggle-collect): the marginal instructions per
call, from two loop lengths, which are the same from run to run.
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


@dataclasses.dataclass(frozen=True)
class Config:
    launches: int = 2_000_000
    rounds: int = 5
    callgrind: bool = True

    def __post_init__(self):
        if self.launches < 1000 or self.rounds <= 0:
            raise ValueError(f"--launches must be >= 1000 and --rounds > 0 "
                             f"(got {self.launches}, {self.rounds})")


def parse_args(argv: list[str]) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launches", type=int, default=2_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-callgrind", dest="callgrind", action="store_false")
    a = p.parse_args(argv)
    try:
        return Config(a.launches, a.rounds, a.callgrind)
    except ValueError as exc:
        p.error(str(exc))


def env_for(variant: str, shm: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XPU_TIMER_", "FAKE_"))}
    env.pop("LD_PRELOAD", None)
    env["FAKE_CUDA_INLINE"] = "1"
    if variant != "off":
        env.update(LD_PRELOAD=HOOK, XPU_TIMER_SHM_DIR=shm)
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


def wall(cfg: Config, shm: str) -> dict:
    samples = {(c, v): [] for c in ("launch", "gemm") for v in VARIANTS}
    for _ in range(cfg.rounds):
        for v in VARIANTS:
            fields = run([HOOKPROG, "bench", str(cfg.launches)], v, shm).split()
            samples[("launch", v)].append(float(fields[1]))
            samples[("gemm", v)].append(float(fields[3]))
    return {k: statistics.median(xs) for k, xs in samples.items()}


def instructions(loop: str, n: int, variant: str, shm: str) -> int:
    """Instructions executed inside loop (and its callees), main thread only."""
    with tempfile.NamedTemporaryFile(suffix=".cg") as cg:
        run(["valgrind", "--tool=callgrind", f"--toggle-collect={loop}",
             f"--callgrind-out-file={cg.name}", HOOKPROG, "bench", str(n)], variant, shm)
        text = open(cg.name).read()
    return int(re.search(r"^(?:totals|summary): (\d+)", text, re.M).group(1))


def callgrind(shm: str) -> dict:
    out = {}
    n1, n2 = 20_000, 120_000  # launches; the GEMM loop runs a tenth as many
    for call, loop, div in (("launch", "bench_launch_loop", 1), ("gemm", "bench_gemm_loop", 10)):
        for v in VARIANTS:
            delta = instructions(loop, n2, v, shm) - instructions(loop, n1, v, shm)
            out[(call, v)] = delta / ((n2 - n1) / div)
    return out


def show(title: str, figures: dict, unit: str) -> None:
    print(title)
    for call in ("launch", "gemm"):
        base = figures[(call, "off")]
        cells = "  ".join(f"{v} {figures[(call, v)]:8.1f}" for v in VARIANTS)
        print(f"  {call:6} {unit} per call: {cells}   hook adds {figures[(call, 'hook')] - base:+.1f}")


def main(argv=None) -> int:
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    for d in ("kernel_hook", "tests/kernel_hook"):
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, d)], check=True)
    with tempfile.TemporaryDirectory(prefix="hook-cpu-bench-") as shm:
        show(f"wall time, median of {cfg.rounds} interleaved rounds "
             f"({cfg.launches} launches, {cfg.launches // 10} GEMMs each):", wall(cfg, shm), "ns")
        if cfg.callgrind and shutil.which("valgrind"):
            show("callgrind, marginal instructions (launch loop / GEMM loop only):",
                 callgrind(shm), "Ir")
        elif cfg.callgrind:
            print("callgrind: skipped: valgrind is not installed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
