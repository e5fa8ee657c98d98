"""A restarted worker's process group on keys of its own attempt.

torch 2.13's agent store outlives a restart: the static rendezvous keeps one
TCPStore for the launcher's whole life, and a worker's env:// rendezvous is a
client of it with no per-attempt prefix (torch/distributed/rendezvous.py:
"We create a new TCPStore for every retry so no need to add prefix", which
holds for c10d only). The killed attempt's keys are still there, so a
restarted gloo rank dials a dead peer's address (connection refused) and a
NCCL rank can read the old unique id (pytorch/pytorch#135712). The launcher
sets ``XPU_TIMER_ATTEMPT_STORE=1`` for a static rendezvous with
--max-restarts; in a restarted worker (TORCHELASTIC_RESTART_COUNT > 0) the
env:// handler then hands out the agent's store under
``xpu-diag/attempt<N>/``. Every node restarts together under static rendezvous (a failed worker fails its peers),
so N agrees across the job. (For c10d the launcher sets torch's own
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: a fresh store each round.)
"""

from __future__ import annotations

import os
import sys

from diag.common import envnames
from diag.tracer import import_hooks

PREFIX = "xpu-diag/attempt{}"


def install(env=os.environ) -> int | None:
    """Wrap the env:// handler in a restarted worker; returns the attempt, or
    None where nothing is done (first attempt, not asked, not the agent's store)."""
    if env.get(envnames.ATTEMPT_STORE) != "1" or env.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    try:
        attempt = int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return None
    if attempt < 1:
        return None
    import_hooks.when_imported("torch.distributed.rendezvous", lambda mod: _wrap(mod, attempt))
    return attempt


def _wrap(mod, attempt: int) -> None:
    handlers = getattr(mod, "_rendezvous_handlers", None)
    inner = handlers.get("env") if isinstance(handlers, dict) else None
    if inner is None:   # another torch: leave its rendezvous alone
        sys.stderr.write("xpu-diag: this torch has no env:// rendezvous handler to key by attempt; a restarted "
                         "process group may read the killed attempt's keys\n")
        return

    def keyed(url, **kwargs):
        from torch.distributed import PrefixStore
        for store, rank, world_size in inner(url, **kwargs):
            yield PrefixStore(PREFIX.format(attempt), store), rank, world_size
    handlers["env"] = keyed
