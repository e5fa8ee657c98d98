"""The launcher's part in recovery (docs/recovery.md): the node's snapshot
store, where its copies go, and leaving the job when a hang is blamed on
this node's hardware.

The store is made before the first worker starts and removed when the
launcher exits: it lives in this process's lifetime, across every torchrun
restart, which is what lets a restarted worker find its predecessor's
snapshot in memory. The agent (diag/agent/lastwords.py) persists it.
"""

from __future__ import annotations

import os
import signal

from diag.common import envnames
from diag.faultlist import EXIT_FAULTY_NODE
from diag.recover import api as recover_api
from diag.recover import store


def default_persist_dir(config) -> str:
    """``<timeline-path>/<job-id>/ckpt``: beside the job's hang events, which
    are on node 0; for a node loss, --ckpt-dir must be shared by every node."""
    return os.path.join(config.timeline_path, config.job_id, "ckpt")


class NodeRecovery:
    def __init__(self, config, say):
        self.config = config
        self._say = say
        self.persist_dir = config.ckpt_dir or default_persist_dir(config)
        self.leaving: str | None = None
        try:
            self.store_dir: str | None = store.create_store_dir(config.job_id, config.node_rank)
        except recover_api.StoreUnavailable as exc:
            self.store_dir = None
            say(f"{exc}; snapshots are off on this node, training goes on")

    def worker_env(self) -> dict:
        """What the workers' Checkpointer reads (diag/recover/api.py)."""
        if self.store_dir is None:
            return {}
        return {recover_api.ENV_STORE_DIR: self.store_dir, recover_api.ENV_PERSIST_DIR: self.persist_dir}

    def restart_env(self, env=os.environ) -> dict:
        """A restart that can build its process group again (attempt_store.py
        says why): torch's own switch for c10d, our per-attempt keys for the
        static rendezvous. A user's own setting is kept."""
        if not self.config.restarts:
            return {}
        if self.config.rdzv_backend == "c10d":
            return {} if "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" in env else {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        if self.config.rdzv_backend == "static":
            return {} if envnames.ATTEMPT_STORE in env else {envnames.ATTEMPT_STORE: "1"}
        return {}

    def leave(self, reason: str) -> None:
        """Called by the agent (its command thread): stop torchrun here the way
        a scale-down does. SIGTERM makes torchrun raise SignalException, and on
        that path it does not close the rendezvous (launcher/api.py), so the
        other nodes go on without this one."""
        self.leaving = reason
        os.kill(os.getpid(), signal.SIGTERM)

    def outcome(self, status: int) -> int:
        """torchrun's status, or 75 (the fault list's "try elsewhere") when this node left."""
        if self.leaving is None:
            return status
        self._say(f"node {self.config.node_rank} leaves the job: {self.leaving}; it does not rejoin the "
                  f"rendezvous, the other nodes restart without it (--nnodes {self.config.nnodes_min}:"
                  f"{self.config.nnodes_max})")
        return EXIT_FAULTY_NODE

    def close(self) -> None:
        if self.store_dir is not None:
            store.remove_store_dir(self.store_dir)
