"""Step-time overhead of the kernel hook on a real model, side by side.

    python3 bench/hook_step_overhead.py [--nproc 2] [--rounds 3] [--steps 40] [--out FILE.json]

Trains GPT-2 small (12 layers, 768 wide, random weights from a transformers
config) with DDP over NCCL on --nproc GPUs (bench/hook_step_worker.py), via
torch.distributed.run, in three variants interleaved round by round: without
the hook, with it (LD_PRELOAD + XPU_TIMER_SHM_DIR, a reader thread draining the
regions every second as the node agent would), and with it switched off
(XPU_TIMER_HOOK_DISABLE=1). Prints the median step time of each, its spread
(min..max over all timed steps of all rounds) and the overhead against the
unhooked run. Target: within 0.5 %.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
HOOK = os.path.join(ROOT, "diag", "lib", "libxpu_timer_hook.so")
WORKER = os.path.join(ROOT, "bench", "hook_step_worker.py")
VARIANTS = ("off", "hook", "disabled")


@dataclasses.dataclass(frozen=True)
class Config:
    nproc: int = 2
    rounds: int = 3
    steps: int = 40
    warmup: int = 10
    batch: int = 8
    seq: int = 1024
    out: str | None = None

    def __post_init__(self):
        for f in ("nproc", "rounds", "steps", "batch", "seq"):
            if getattr(self, f) <= 0:
                raise ValueError(f"--{f} must be positive, got {getattr(self, f)}")


def parse_args(argv: list[str]) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in dataclasses.fields(Config):
        if f.name != "out":
            p.add_argument(f"--{f.name}", type=int, default=f.default)
    p.add_argument("--out")
    a = p.parse_args(argv)
    try:
        return Config(**vars(a))
    except ValueError as exc:
        p.error(str(exc))


class RegionDrainer(threading.Thread):
    """Consumes every region in a directory once a second, as the agent does."""

    def __init__(self, directory: str):
        super().__init__(daemon=True)
        self.directory, self.stop, self.records = directory, threading.Event(), 0

    def run(self):
        from diag.records.reader import scan
        readers: dict = {}
        while not self.stop.wait(1.0):
            readers = scan(self.directory, readers).readers
            for r in readers.values():
                self.records += len(r.poll())


def run_variant(cfg: Config, variant: str) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPU_TIMER_")}
    env.pop("LD_PRELOAD", None)
    with tempfile.TemporaryDirectory(prefix="hook-step-") as shm:
        drainer = RegionDrainer(shm)
        if variant != "off":
            env.update(LD_PRELOAD=HOOK, XPU_TIMER_SHM_DIR=shm)
        if variant == "disabled":
            env["XPU_TIMER_HOOK_DISABLE"] = "1"
        drainer.start()
        out = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             f"--nproc-per-node={cfg.nproc}", WORKER, str(cfg.steps), str(cfg.warmup),
             str(cfg.batch), str(cfg.seq)], env=env, capture_output=True, text=True,
            timeout=900)
        drainer.stop.set()
        drainer.join()
    if out.returncode != 0:
        raise RuntimeError(f"{variant}: rc {out.returncode}: {out.stderr.strip()[-2000:]}")
    line = next(l for l in out.stdout.splitlines() if l.startswith("STEP_TIMES "))
    if variant == "hook" and drainer.records == 0:
        raise RuntimeError("hook variant: the hook wrote no records; is it loaded?")
    return json.loads(line.split(" ", 1)[1])


def main(argv=None) -> int:
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    import torch
    if torch.cuda.device_count() < cfg.nproc:
        print(f"hook_step_overhead: skipped: needs {cfg.nproc} CUDA GPUs, "
              f"found {torch.cuda.device_count()}")
        return 0
    samples = {v: [] for v in VARIANTS}
    for rnd in range(cfg.rounds):
        for v in VARIANTS:
            times = run_variant(cfg, v)
            samples[v] += times
            print(f"round {rnd} {v:9} median {statistics.median(times) * 1e3:8.2f} ms", flush=True)
    base = statistics.median(samples["off"])
    print(f"\n{'variant':9} {'median ms':>10} {'min':>8} {'max':>8} {'overhead':>9}")
    result = {}
    for v in VARIANTS:
        med = statistics.median(samples[v])
        print(f"{v:9} {med * 1e3:10.2f} {min(samples[v]) * 1e3:8.2f} "
              f"{max(samples[v]) * 1e3:8.2f} {100 * (med / base - 1):+8.2f}%")
        result[v] = {"median_s": med, "steps": samples[v], "overhead_pct": 100 * (med / base - 1)}
    if cfg.out:
        with open(cfg.out + ".tmp", "w") as f:
            json.dump({"config": dataclasses.asdict(cfg), "result": result}, f, indent=1)
        os.replace(cfg.out + ".tmp", cfg.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
