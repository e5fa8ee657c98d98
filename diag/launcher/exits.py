"""How this node's workers ended, from torchrun's result, for the FAILED verdict.

torch's elastic agent runs in the launcher's process and reaps the workers
itself, so their statuses are learned from its result (torchrun.run's
``outcome``), not from the processes: exit codes and signals, the exception
torchrun read from each worker's TORCHELASTIC_ERROR_FILE (the bootstrap
writes it for an uncaught exception, as ``@record`` does), and which rank its
"Root Cause" names. An OOM kill is the cgroup's count (cgroup v2
``memory.events``, ``oom_kill``) going up while the job ran. The agent sends
them with its exited ranks (RankProgress.exit); the collector judges.
"""

from __future__ import annotations

import signal

from diag.pb import collector_pb2 as pb

CGROUP_ROOT = "/sys/fs/cgroup"


def oom_kills(proc_cgroup: str = "/proc/self/cgroup", root: str = CGROUP_ROOT) -> int | None:
    """The OOM kills this process's cgroup (v2) has counted, or None where
    there is no cgroup v2 or it cannot be read."""
    try:
        with open(proc_cgroup) as f:
            path = next((line.strip()[3:] for line in f if line.startswith("0::")), None)
        if path is None:
            return None
        with open(f"{root}{path.rstrip('/')}/memory.events") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def error_line(failure) -> str:
    """The exception torchrun read from the worker's error file ("" for none:
    its made-up messages, "Signal 6 (SIGABRT) received by PID 7", are not the
    worker's)."""
    if getattr(failure, "error_file", "<N/A>") in ("<N/A>", "", None):
        return ""
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    return str(message or "")


def rank_exits(outcome: dict, local: dict[int, int], oom_before: int | None, oom_after: int | None,
               stopped_by: int | None = None) -> dict[int, tuple[int, pb.RankExit]]:
    """rank -> (pid, RankExit) for this node's ranks (``local``: rank -> pid
    of its last worker). A rank torchrun does not list as failed exited 0.
    ``stopped_by``: the signal that stopped the launcher (Ctrl-C): no rank's
    failure."""
    signum = stopped_by or outcome.get("signal")
    failures = outcome.get("failures") or {}
    oom = oom_before is not None and oom_after is not None and oom_after > oom_before
    out = {}
    for rank, pid in local.items():
        if signum:
            out[rank] = (0, pb.RankExit(stopped=True, signal=int(signum)))
            continue
        f = failures.get(rank)
        if f is None:
            out[rank] = (pid, pb.RankExit(exit_code=0))
            continue
        code = int(f.exitcode)
        sig = -code if code < 0 else 0
        out[rank] = (f.pid or 0, pb.RankExit(
            exit_code=code if code >= 0 else 0, signal=sig, error=error_line(f),
            oom_kill=oom and sig == signal.SIGKILL, torchrun_root=outcome.get("root") == rank))
    return out
