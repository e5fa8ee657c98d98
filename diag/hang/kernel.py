"""The stuck_kernel verdict rule: a rank the others wait for is stuck behind
a GPU kernel that never ends.

Such a rank's host thread waits for the device in a copy back to the host
(``.item()``), which the driver spins on: it uses CPU, so ``blocked`` never
sees it quiet, and it is in no op, so only ``--hang-timeout`` named it. The
hook's completion probes (docs/kernel_hook.md, "Kernels that never end")
see the kernel launched and not ended, and how long that kernel's earlier
launches took; the agent reports the oldest such kernel per rank
(RankProgress.unfinished_kernel).

It is proof when all of these hold for a rank the others wait for:
- it is alive and in no op (one in a collective is judged by the other rules);
- its kernel has run ``MIN_AGE_S`` at least, and ``PAST_HISTORY`` times the
  longest of its ``MIN_RUNS`` or more earlier runs: a kernel with no history,
  or one that has run long before (a 20 s GEMM), is left to the timeout;
- it has launched no kernel for ``MIN_AGE_S``: its host waits on the device.
"""

from __future__ import annotations

from diag.hang.api import Case, Findings, Rule

STUCK_KERNEL = "stuck_kernel"
MIN_AGE_S = 20.0       # a kernel this old, at least ...
PAST_HISTORY = 10.0    # ... and this many times its longest earlier run
MIN_RUNS = 3           # earlier runs that ended: fewer is no history


class StuckKernelRule(Rule):
    name = STUCK_KERNEL
    evidence = (f"a rank the others wait for, in no op, whose kernel has run {MIN_AGE_S:g} s and "
                f"{PAST_HISTORY:g} times its longest earlier run (the hook's completion probes), "
                f"and which launched nothing for {MIN_AGE_S:g} s")
    wait = "proof_s"   # when it looks; the kernel's own age is the proof (MIN_AGE_S)
    decides = True

    def judge(self, case: Case) -> Findings:
        view = case.view
        for rank in case.findings.culprits:
            entry = view.ranks.get(rank)
            if entry is None:
                continue
            what = stuck(rank, entry.progress, max(0.0, view.now - entry.received))
            if what is not None:
                return self.decided(case.findings, what)
        return case.findings


def stuck(rank: int, p, since_report_s: float) -> str | None:
    """The evidence phrase if rank's report ``p`` (a RankProgress, built
    ``since_report_s`` ago) shows it stuck behind a kernel, else None."""
    if not p.alive or p.HasField("oldest_in_flight") or not p.HasField("unfinished_kernel"):
        return None
    k = p.unfinished_kernel
    if k.history_runs < MIN_RUNS or k.history_max_ns == 0:
        return None
    age_s = k.age_ns * 1e-9 + since_report_s
    quiet_s = k.quiet_ns * 1e-9 + since_report_s
    longest_s = k.history_max_ns * 1e-9
    if age_s < max(MIN_AGE_S, PAST_HISTORY * longest_s) or quiet_s < MIN_AGE_S:
        return None
    since = ("it launched nothing since" if k.launches_since == 0 else
             f"it launched {k.launches_since} kernel(s) after it, none for {quiet_s:.0f} s")
    return (f"rank {rank}'s kernel {k.name or '(unnamed)'} launched {age_s:.0f} s ago has not ended "
            f"(its earlier runs took at most {_duration(longest_s)}); {since}")


def _duration(s: float) -> str:
    if s >= 1.0:
        return f"{s:.1f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"
