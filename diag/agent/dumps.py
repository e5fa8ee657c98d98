"""Take one rank's stacks: py-spy (always), gdb and eu-stack (where installed).

Every tool runs with a timeout. The result is a list of (format, bytes);
a tool that fails adds an error entry saying why, so the collector can write
``rank...error.txt`` instead of nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from diag.common import envnames
from diag.pb import collector_pb2 as pb

FMT = pb.StackDump.Format
PTRACE_HELP = ("ptrace was refused: run the launcher as root, add the SYS_PTRACE "
               "capability (docker run --cap-add SYS_PTRACE), or set "
               "kernel.yama.ptrace_scope=0 (sysctl -w kernel.yama.ptrace_scope=0)")
_REFUSED = ("permission denied", "operation not permitted", "ptrace: operation",
            "failed to suspend", "ptrace_attach")
MAX_BYTES = 3 << 20  # below gRPC's default 4 MiB message limit


def py_spy_path() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.access(here, os.X_OK) else shutil.which("py-spy")


ENV_TOOLS = envnames.DUMP_TOOLS
ALL_TOOLS = ("py-spy", "gdb", "eu-stack")


def default_tools() -> tuple[str, ...]:
    """py-spy plus one all-threads native dumper: eu-stack where installed,
    else gdb. gdb loads every library's symbols, which takes seconds per torch
    rank (it timed out at 30 s with 4 ranks on 2 cores); eu-stack takes well
    under one."""
    return ("py-spy", "eu-stack" if shutil.which("eu-stack") else "gdb")


def tools_from_env(env=os.environ) -> tuple[str, ...]:
    """XPU_TIMER_DUMP_TOOLS=py-spy,gdb,eu-stack picks the dumpers; unset (or
    naming none of them) means :func:`default_tools`."""
    raw = env.get(ENV_TOOLS, "")
    chosen = tuple(t for t in (p.strip() for p in raw.split(",")) if t in ALL_TOOLS)
    return chosen or default_tools()


def commands(pid: int, tools=ALL_TOOLS) -> list[tuple[int, list[str]]]:
    out = []
    spy = py_spy_path()
    if spy and "py-spy" in tools:
        out.append((FMT.FORMAT_PYSPY_JSON, [spy, "dump", "--native", "--json", "--pid", str(pid)]))
    gdb = shutil.which("gdb")
    if gdb and "gdb" in tools:
        out.append((FMT.FORMAT_GDB_TEXT, [
            gdb, "-p", str(pid), "-batch", "-nx", "-iex", "set debuginfod enabled off",
            "-iex", "set auto-load off", "-ex", "thread apply all bt"]))
    eu = shutil.which("eu-stack")
    if eu and "eu-stack" in tools:
        out.append((FMT.FORMAT_EU_STACK_TEXT, [eu, "-p", str(pid)]))
    return out


def dump(pid: int, timeout: float = 30.0, env=None,
         tools=ALL_TOOLS) -> list[tuple[int, bytes]]:
    """Stacks of ``pid`` in every available format, errors included. Never raises."""
    results = []
    errors = []
    cmds = commands(pid, tools)
    if "py-spy" in tools and not any(fmt == FMT.FORMAT_PYSPY_JSON for fmt, _ in cmds):
        errors.append("py-spy is not installed (pip install py-spy)")
    for fmt, argv in cmds:
        name = os.path.basename(argv[0])
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, env=env)
        except subprocess.TimeoutExpired:
            errors.append(f"{name} on pid {pid} timed out after {timeout:.0f} s")
            continue
        except OSError as exc:
            errors.append(f"{name} on pid {pid} could not run: {exc}")
            continue
        text = (proc.stdout + proc.stderr).decode("utf-8", "replace").lower()
        if proc.returncode != 0 or _refused(fmt, text):
            errors.append(_why(name, pid, proc, text))
            continue
        results.append((fmt, proc.stdout[:MAX_BYTES]))
    if errors:
        results.append((FMT.FORMAT_ERROR_TEXT, ("\n".join(errors) + "\n").encode()))
    return results


def _refused(fmt: int, text: str) -> bool:
    # gdb exits 0 even when it could not attach; its output says so.
    return fmt == FMT.FORMAT_GDB_TEXT and ("ptrace:" in text or "could not attach" in text)


def _why(name: str, pid: int, proc, text: str) -> str:
    if any(marker in text for marker in _REFUSED):
        return f"{name} on pid {pid}: {PTRACE_HELP}"
    if "no such process" in text or not os.path.exists(f"/proc/{pid}"):
        return f"{name} on pid {pid}: the process is gone"
    last = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
    detail = last[-1] if last else f"exit status {proc.returncode}"
    return f"{name} on pid {pid} failed (exit {proc.returncode}): {detail}"
