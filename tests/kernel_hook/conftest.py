"""Builds the hook and the fake runtime once per session; runs test programs.

The fake libcudart/libcublas/libcublasLt/libnccl carry the real sonames, so a
program linked against them exercises the hook's real resolution path
(dlsym(RTLD_NEXT), then dlopen(soname, RTLD_NOLOAD)).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import subprocess

import pytest

from diag.records import format as fmt
from diag.records.reader import RegionReader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "build")
HOOK = os.path.join(ROOT, "diag", "lib", "libxpu_timer_hook.so")
HOOKPROG = os.path.join(BUILD, "progs", "hookprog")


def _make(*args: str) -> None:
    proc = subprocess.run(["make", "-s", *args], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"make {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")


@pytest.fixture(scope="session")
def built() -> str:
    """Builds the hook (make -C kernel_hook) and the fakes; returns the build dir."""
    _make("-C", os.path.join(ROOT, "kernel_hook"))
    _make("-C", HERE)
    return BUILD


@dataclasses.dataclass
class Region:
    path: str
    header: fmt.Header
    records: list[fmt.Record]
    dropped: int
    disabled: bool

    def of(self, event: int, name: str | None = None) -> list[fmt.Record]:
        return [r for r in self.records if r.event == event and (name is None or r.name == name)]


def read_regions(shm_dir: str) -> list[Region]:
    """Every hook region in shm_dir, with all its records, via the one reader."""
    out = []
    for path in sorted(glob.glob(os.path.join(shm_dir, "hook-*.ring"))):
        reader = RegionReader(path)
        out.append(Region(path, reader.header, reader.drain(), reader.dropped, reader.disabled))
        reader.close()
    return out


def run_prog(mode: str, *args: str, shm_dir: str | None, preload: bool = True,
             env: dict | None = None, lib_dir: str | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs hookprog MODE ARGS, with the hook preloaded unless preload=False."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("XPU_TIMER_", "FAKE_", "LD_PRELOAD"))}
    if preload:
        e["LD_PRELOAD"] = HOOK
    if shm_dir:
        e["XPU_TIMER_SHM_DIR"] = shm_dir
    if lib_dir:  # a fake variant with the same soname, found before the rpath
        e["LD_LIBRARY_PATH"] = lib_dir
    e.update(env or {})
    return subprocess.run([HOOKPROG, mode, *args], env=e, capture_output=True, text=True,
                          timeout=timeout)
