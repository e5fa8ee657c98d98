"""The blocked verdict rule: every rank the others wait for is alive, has no
op in flight (not even a named host function, which says it is doing known
work), and its whole process tree (data-loader and compile workers
included) has used no CPU, moved no bytes, launched no kernel and not
waited on a disk (RankActivity.quiet_ns, diag/agent/activity.py) for
--blocked-after, while the others have waited that long. A rank that
evaluates, compiles, writes a checkpoint or starts loader workers is busy in
one of those ways."""

from __future__ import annotations

from diag.hang.api import Case, Findings, Rule


class BlockedRule(Rule):
    name = "blocked"
    evidence = ("every rank the others wait for: alive, no op in flight, and no CPU, I/O, kernel launch or "
                "disk wait anywhere in its process tree (RankActivity.quiet_ns)")
    wait = "blocked_s"
    decides = True

    def judge(self, case: Case) -> Findings:
        found, view = case.findings, case.view
        wait_s = self.wait_s(case.limits)
        culprits = found.culprits
        if not culprits:
            return found
        quietest = []
        for rank in culprits:
            entry = view.ranks.get(rank)
            if entry is None:       # never reported, or its agent is silent: nothing is known
                return found
            p = entry.progress
            if not p.alive or not p.HasField("activity"):
                return found
            if p.HasField("oldest_in_flight"):
                # In a function the user named (known work), or waiting in another
                # group's op (the wait goes on elsewhere): the timeout judges it.
                return found
            quiet = p.activity.quiet_ns * 1e-9 + max(0.0, view.now - entry.received)
            if quiet < wait_s:
                return found
            quietest.append((rank, quiet))
        rank, quiet = min(quietest, key=lambda rq: rq[1])
        who = f"rank {rank}" if len(quietest) == 1 else f"{len(quietest)} ranks"
        return self.decided(found, f"{who} waited for: no CPU, I/O or kernel launch for {quiet:.0f} s")
