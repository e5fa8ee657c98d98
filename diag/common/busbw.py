"""Bus bandwidth factors of nccl-tests (doc/PERFORMANCE.md): busbw = algbw x factor.

One table for netcheck's measurements and the performance view, keyed by the
op names the Python tracer (``all_reduce``) and the hook (``ncclAllReduce``)
record. ``bytes`` follow nccl-tests too (all-gather / reduce-scatter: the whole
buffer), so algbw = bytes / time.
"""

from __future__ import annotations

ALL_REDUCE = ("all_reduce", "ncclAllReduce")
ALL_GATHER_LIKE = ("all_gather", "all_gather_into_tensor", "reduce_scatter",
                   "reduce_scatter_tensor", "ncclAllGather", "ncclReduceScatter",
                   "all_to_all", "all_to_all_single")


def factor(op: str, nranks: int) -> float:
    """all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n;
    broadcast, reduce, send, recv and anything else 1. 0 for fewer than two
    ranks: nothing crosses a bus (see ``busbw``)."""
    if nranks < 2:
        return 0.0
    if op in ALL_REDUCE:
        return 2.0 * (nranks - 1) / nranks
    if op in ALL_GATHER_LIKE:
        return (nranks - 1) / nranks
    return 1.0


def defined(nranks: int) -> bool:
    """Whether a bus bandwidth means anything: two ranks or more. One rank's
    collective is a local copy (a 1-rank all-reduce read 198 TB/s on an H100),
    and a size of 0 is a communicator whose size is unknown."""
    return nranks >= 2


def busbw(op: str, nranks: int, nbytes: float, seconds: float) -> float | None:
    """Bytes per second on the bus; None where undefined (``defined``) or
    when nothing was timed."""
    if not defined(nranks) or seconds <= 0:
        return None
    return nbytes / seconds * factor(op, nranks)
