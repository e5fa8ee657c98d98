"""Which ops of one rank are open: START seen, END not yet (docs/records.md).

The agent's state (``diag/agent/state.py``) and its timeline ring
(``diag/timeline/ring.py``) each keep one table a rank; the rule that ends an
op whose END record was lost lives here alone (the lane rule):

Within one region, ops of one lane of a communicator end in the order they
started (docs/records.md, "Lanes" and "Events"). So an END for seq *s* also
ends every op still listed for that region, communicator and lane with a
lower non-zero seq: a full ring dropped its END. A record's lane is its kind:
a p2p END says nothing about a collective in flight, nor the reverse. Ops on
no lane (GEMMs, host functions: seq 0) end by their own END alone.

Pure logic: no I/O, no clock, not thread-safe (the agent holds its lock).
"""

from __future__ import annotations

from diag.records.format import COMM_LANES


class OpenOps(dict):
    """``(region, op_id) -> op``: what the owner keeps of each open op's START
    (the START record itself, or the agent's ``InFlight``); an op is anything
    with ``comm_id``, ``kind`` and ``seq``.

    A dict, so the owner reads it as one (iterate, ``len``, ``clear``); it
    lists and unlists ops only through :meth:`start`, :meth:`end` and
    :meth:`forget_region`, so the lane rule holds.
    """

    __slots__ = ("cap",)

    def __init__(self, cap: int | None = None):
        super().__init__()
        if cap is not None and cap <= 0:
            raise ValueError(f"open-op cap {cap!r} must be positive")
        self.cap = cap   # None: unbounded; else an op starting while full is not listed

    def start(self, region: str, op_id: int, op) -> bool:
        """Lists ``op``; False (not listed) when ``cap`` ops are open already."""
        if self.cap is not None and len(self) >= self.cap:
            return False
        self[(region, op_id)] = op
        return True

    def end(self, region: str, rec):
        """Applies the END record ``rec`` of ``region``: unlists its op and,
        on a lane, every earlier op of that lane (the lane rule above).
        Returns what :meth:`start` listed for it, or None (never listed: its
        START came before the reader, or the table was full)."""
        started = self.pop((region, rec.op_id), None)
        seq = rec.seq
        if seq and self and rec.kind in COMM_LANES:
            comm_id, kind = rec.comm_id, rec.kind
            stale = [key for key, op in self.items()
                     if key[0] == region and op.comm_id == comm_id and op.kind == kind
                     and 0 < op.seq < seq]
            for key in stale:
                del self[key]
        return started

    def forget_region(self, region: str) -> None:
        """The region is gone: its open ops will never end."""
        for key in [key for key in self if key[0] == region]:
            del self[key]
