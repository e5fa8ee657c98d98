"""Runs tests/recover/scripts/train.py as a 2-rank gloo job, with the store
and persist directories in the environment as xpu_timer_launch sets them.

The ranks are forked from the preloaded-torch server (tests/preloaded.py)
with the environment torchrun gives its workers (RANK, WORLD_SIZE, MASTER_ADDR,
...): torchrun's own process (another torch import) only spawned them, and each
rank of these jobs ends itself (train.py kills every rank at DIE_AT), so what
it added was start-up time."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import torch

from diag.common import envnames
from diag.common.net import free_port
from tests import preloaded

ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(Path(__file__).parent / "scripts" / "train.py")


def env(store: str | None, persist: str | None) -> dict:
    out = {k: v for k, v in os.environ.items() if not k.startswith("XPU_TIMER_")}
    out.update(PYTHONWARNINGS="ignore", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    if store:
        out[envnames.CKPT_DIR] = store
    if persist:
        out[envnames.CKPT_PERSIST_DIR] = persist
    return out


def forked(argv: list[str], store=None, persist=None, fsize: int | None = None,
           **extra: str) -> preloaded.Forked:
    """``python *argv`` with this module's environment (plus ``extra``), forked
    from the preloaded-torch server; ``fsize``: its RLIMIT_FSIZE."""
    return preloaded.Forked(argv, dict(env(store, persist), **extra), str(ROOT), fsize)


def run(out: Path, mode: str, steps: int, store=None, persist=None, die=None, world: int = 2,
        timeout: float = 120) -> subprocess.CompletedProcess:
    """One run of the job (world ranks), or one plain process for mode "single".
    Its returncode is the first rank's that failed (0 if none did), its
    stdout and stderr the ranks' in rank order."""
    out.mkdir(parents=True, exist_ok=True)
    args = [TRAIN, str(out), mode, str(steps), *(map(str, die) if die else ())]
    if mode == "single":
        return ended(args, [forked(args, store, persist)], timeout)
    return ranks(args, world, store, persist, timeout)


def ranks(args: list[str], world: int, store=None, persist=None, timeout: float = 120,
          **extra: str) -> subprocess.CompletedProcess:
    """``python *args`` as the ``world`` ranks of one job on this host (the
    environment torchrun gives its workers, plus ``extra``), run to the end;
    as ``run``'s result."""
    rendezvous = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world),
                      LOCAL_WORLD_SIZE=str(world), GROUP_RANK="0", GROUP_WORLD_SIZE="1", **extra)
    return ended(args, [forked(args, store, persist, RANK=str(r), LOCAL_RANK=str(r), **rendezvous)
                        for r in range(world)], timeout)


def ended(args: list[str], procs: list[preloaded.Forked], timeout: float) -> subprocess.CompletedProcess:
    deadline = time.monotonic() + timeout
    try:
        codes = [p.wait(max(0.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:                  # a timeout: the rest go too, as torchrun's would
            p.kill()
            p.wait()
    outputs = [p.output() for p in procs]
    return subprocess.CompletedProcess(args, next((c for c in codes if c), 0), "".join(o for o, _ in outputs),
                                       "".join(e for _, e in outputs))


def params(out: Path, world: int = 2) -> list[list[torch.Tensor]]:
    return [torch.load(out / f"rank{r}.pt") for r in range(world)]


def restored(out: Path, world: int = 2) -> list[int]:
    return [int((out / f"rank{r}.restored").read_text()) for r in range(world)]


def bitwise_equal(a, b) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(s.dtype == t.dtype and torch.equal(s, t) for s, t in zip(x, y))
        for x, y in zip(a, b))
