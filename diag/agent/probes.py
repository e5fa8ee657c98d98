"""The hook's kernel completion probes, as the agent reports them
(docs/kernel_hook.md, "Kernels that never end"; docs/records.md, PROBE).

The hook's drainer writes a PROBE record every count period while its
process's oldest probe has been unfinished for over a second, and one with
op_id 0 once none is. The agent keeps the last one per rank and reports it
as RankProgress.unfinished_kernel, aged on its own clock (the record's times
are CLOCK_MONOTONIC of this host): the stuck_kernel rule (diag/hang/kernel.py)
reads it.
"""

from __future__ import annotations

import typing

from diag.pb import collector_pb2 as pb


class Unfinished(typing.NamedTuple):
    """One PROBE record: the kernel, when it was launched, its earlier runs
    (count, longest launch to end), the launches since it, and when the
    process last launched anything (both times CLOCK_MONOTONIC ns)."""

    name: str
    launched_ns: int
    runs: int
    max_ns: int
    launches_since: int
    last_launch_ns: int


def from_record(rec) -> Unfinished | None:
    """The probe a PROBE record says is unfinished; None: none is (op_id 0)."""
    if rec.op_id == 0:
        return None
    return Unfinished(rec.name, rec.t_mono_ns, rec.seq, rec.duration_ns, rec.count,
                      max(rec.bytes, rec.t_mono_ns))


def message(probe: Unfinished, now_ns: int) -> pb.KernelProbe:
    """RankProgress.unfinished_kernel as of ``now_ns``."""
    return pb.KernelProbe(name=probe.name, age_ns=max(0, now_ns - probe.launched_ns), history_runs=probe.runs,
                          history_max_ns=probe.max_ns, launches_since=probe.launches_since,
                          quiet_ns=max(0, now_ns - probe.last_launch_ns))
