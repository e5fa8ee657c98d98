"""Which of this node's workers xpu-diag never watched, and why.

A worker whose tracer could not make its progress ring (a full /dev/shm,
XPU_TIMER_TRACER_DISABLE) runs untraced: nothing of it reaches the agent, so
no hang of it can be named. Each such worker says so once on its own
stderr; the closing summary must not then end with "no hang or slow rank
seen" as if every rank had been watched.
"""

from __future__ import annotations

import os

from diag.common import envnames
from diag.common.ranks import fold
from diag.records import format as fmt


def local_world_size(torchrun_argv: list[str]) -> int | None:
    """The workers torchrun starts on this node, as torchrun itself reads
    --nproc-per-node ("gpu", "auto" and numbers); None when it cannot say."""
    try:
        from torch.distributed import run
        return int(run.determine_local_world_size(run.parse_args(torchrun_argv).nproc_per_node))
    except (Exception, SystemExit):   # its parser exits on what it cannot read: not ours to judge
        return None


def free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def unwatched_line(expected: int | None, seen_local: set[int], shm_dir: str, free: int | None,
                   single_node: bool, node_rank: int, env=os.environ) -> str:
    """One line naming the local ranks no progress record came from, and why;
    "" when every one was watched (or the count is not known). ``free``: the
    least free space seen in ``shm_dir``'s file system while the job ran."""
    if not expected:
        return ""
    missing = sorted(set(range(expected)) - seen_local)
    if not missing:
        return ""
    who = (f"rank{'s' if len(missing) > 1 else ''} {fold(missing)}" if single_node else
           f"local rank{'s' if len(missing) > 1 else ''} {fold(missing)} of node {node_rank}")
    ring = fmt.region_size(_int(env.get(envnames.RING_CAPACITY), fmt.DEFAULT_CAPACITY))
    base = os.path.dirname(shm_dir.rstrip("/")) or shm_dir
    if env.get(envnames.TRACER_DISABLE, "") not in ("", "0"):
        why = f"{envnames.TRACER_DISABLE} is set, so no tracer recorded their ops"
    elif free is not None and free < ring:
        why = (f"no room for their progress rings in {base} ({free >> 10} KiB free, {ring >> 10} KiB each; "
               f"free space there or set {envnames.RING_CAPACITY} lower)")
    else:
        why = "no progress record of theirs reached xpu-diag (each worker's 'tracer ... switched off' line says why)"
    return f"{who} {'were' if len(missing) > 1 else 'was'} not watched, so no hang of theirs could be seen: {why}"


def _int(text, default: int) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return default
