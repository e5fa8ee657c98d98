"""Runs tests/recover/scripts/train.py under plain torchrun (2 gloo ranks),
with the store and persist directories in the environment as
xpu_timer_launch sets them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from diag.common import envnames
from diag.common.net import free_port

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


def run(out: Path, mode: str, steps: int, store=None, persist=None, die=None, world: int = 2,
        timeout: float = 120) -> subprocess.CompletedProcess:
    """One torchrun of the job (world ranks), or one plain process for mode "single"."""
    out.mkdir(parents=True, exist_ok=True)
    args = [TRAIN, str(out), mode, str(steps), *(map(str, die) if die else ())]
    if mode == "single":
        cmd = [sys.executable, *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world),
               "--master-port", str(free_port()), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env(store, persist), capture_output=True, text=True,
                          timeout=timeout)


def params(out: Path, world: int = 2) -> list[list[torch.Tensor]]:
    return [torch.load(out / f"rank{r}.pt") for r in range(world)]


def restored(out: Path, world: int = 2) -> list[int]:
    return [int((out / f"rank{r}.restored").read_text()) for r in range(world)]


def bitwise_equal(a, b) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(s.dtype == t.dtype and torch.equal(s, t) for s, t in zip(x, y))
        for x, y in zip(a, b))
