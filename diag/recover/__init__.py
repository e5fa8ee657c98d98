"""Recovery: in-memory snapshots kept by the node agent, persisted copies,
restore of the newest step every rank has (docs/recovery.md).

Workers: ``from diag.recover import Checkpointer``. The agent/launcher:
``diag.recover.store.create_store_dir`` / ``remove_store_dir`` and
``diag.recover.persist.persist_newest``. Contracts: ``diag.recover.api``.
"""

from __future__ import annotations


def __getattr__(name):
    # torch is imported only by a worker that asks for the Checkpointer.
    if name == "Checkpointer":
        from diag.recover.snapshot import Checkpointer
        return Checkpointer
    if name == "RNGState":
        from diag.recover.state import RNGState
        return RNGState
    raise AttributeError(name)


__all__ = ["Checkpointer", "RNGState"]
