"""Verdicts before the timeout, where the evidence proves the hang (issue 36).

``--hang-timeout`` (300 s) waits out anything that only looks stuck: a
checkpoint, an evaluation, a compile warm-up. Some hangs are proven long
before it, and each rule here says what proves it and how long that proof
must hold (its wait) before it is a verdict:

- ``diverged``: the members of a stuck group ran different ops at one seq,
  or some skipped one the others ran (the divergence rule's Mismatch, with
  culprits). Those ops can never complete. 5 s.
- ``deadlock``: every rank of a set is blocked in a collective whose
  missing members are blocked in another collective of the set (a
  collective skipped on one group while the job went on in another): the
  waits form a cycle no time can end (deadlock.py). 5 s.
- ``exited``: a member of a stuck group is gone (its process exited) and
  never started the op the others wait in. 5 s.
- ``frozen_link``: every member waits at one seq, and one link's NCCL proxy
  steps froze while every other channel advanced (the link plugin's
  counters, docs/link.md). 5 s.
- ``gpu_fault``: the GPU of a stuck rank, or of a rank the others wait for,
  reported a fatal XID or ECC error (NVML, docs/gpu.md): its kernels will not
  end. 5 s.
- ``blocked``: every rank the others wait for has no op in flight (not even
  a named host function, which says it is doing known work) and its whole
  process tree (data-loader and compile workers included) has used no CPU,
  moved no bytes, launched no kernel and not waited on a disk
  (RankActivity.quiet_ns, diag/agent/activity.py) for 30 s, while the others
  have waited that long. A rank that evaluates, compiles, writes a
  checkpoint or starts loader workers is busy in one of those ways.

Each is a :class:`Proof`: its name, its evidence, which wait its proof must
hold. Anything else waits for the timeout, as before. ``evaluate`` looks at a
probe analysis: the hang rules (judge.py) run with the shortest of these
waits as their timeout, so their explanation (who is behind, where the
seqs diverge) is there before the timeout; only these rules decide whether
it is a verdict yet.
"""

from __future__ import annotations

import dataclasses

from diag.common.ranks import fold
# Proof and Waits live in api.py (contracts), so rules in modules of their
# own (kernel.py) subclass Proof without importing this module.
from diag.hang.api import Finding, Findings, Proof, View, Waits
from diag.hang.judge import analyse
from diag.hang.kernel import STUCK_KERNEL, StuckKernel
from diag.hang.links import stuck_links
from diag.hang.not_in_collective import EXITED

DIVERGED, DEADLOCK, EXITED_PEER, FROZEN_LINK, GPU_FAULT, BLOCKED, TIMEOUT = (
    "diverged", "deadlock", "exited", "frozen_link", "gpu_fault", "blocked", "timeout")
# what a HANG line's "rule" clause may name
VERDICT_RULES = (TIMEOUT, DIVERGED, DEADLOCK, EXITED_PEER, FROZEN_LINK, GPU_FAULT, BLOCKED, STUCK_KERNEL)


class Diverged(Proof):
    name = DIVERGED
    evidence = "the divergence rule's mismatch in a stuck group, with its culprits"

    def proves(self, probe: Findings, view: View, wait_s: float) -> str | None:
        for m in probe.mismatches:
            if m.diverged_seq is not None and m.culprits:   # a tie with no evidence names no one: no proof
                ranks = ", ".join(map(str, m.culprits[:4])) + (" ..." if len(m.culprits) > 4 else "")
                return (f"group {m.group or m.comm_id} diverged at seq {m.diverged_seq} (rank {ranks}): "
                        f"those ops can never complete")
        return None


class Deadlocked(Proof):
    name = DEADLOCK
    evidence = ("every rank of a set blocked in a collective whose missing members are blocked in another "
                "collective of the set (the deadlock rule, diag/hang/deadlock.py)")

    def proves(self, probe: Findings, view: View, wait_s: float) -> str | None:
        dead = probe.deadlock
        if dead is None or not dead.blocked:
            return None
        ranks = dead.ranks
        who = f"ranks {fold(ranks)}" if len(ranks) > 1 else f"rank {ranks[0]}"
        return (f"{who} each blocked in a collective that waits for ranks blocked in another: "
                f"a cycle no wait can end")


class Exited(Proof):
    name = EXITED_PEER
    evidence = "a member of a stuck group that exited before the op the others wait in"

    def proves(self, probe: Findings, view: View, wait_s: float) -> str | None:
        hung_comms = {g.op.comm_id for g in probe.hung if g.op.is_comm_op}
        for s in probe.suspects:
            entry = view.ranks.get(s.rank) if s.reason == EXITED else None
            if entry is None:
                continue
            for c in entry.progress.comms:
                if c.comm_id in hung_comms and _behind(probe, c):
                    return f"rank {s.rank} exited before the op its group waits in"
        return None


class FrozenLink(Proof):
    name = FROZEN_LINK
    evidence = "every member at one seq; one link's NCCL proxy steps frozen while every other channel advanced"

    def proves(self, probe: Findings, view: View, wait_s: float) -> str | None:
        # only a link whose neighbours moved on: where every channel waits, nothing is proven
        frozen = [link for link in stuck_links(probe, view).links if link.others_advanced]
        if not frozen:
            return None
        link = frozen[0]
        return (f"link rank {link.src_rank} -> rank {link.dst_rank} stuck at step {link.step} "
                f"while every other channel advanced")


class GpuFault(Proof):
    name = GPU_FAULT
    evidence = "a fatal XID or ECC error on the GPU of a stuck rank or of one the others wait for (NVML)"

    def proves(self, probe: Findings, view: View, wait_s: float) -> str | None:
        for rank in sorted(set(probe.hung_ranks) | set(probe.culprits)):
            entry = view.ranks.get(rank)
            if entry is None or not entry.progress.HasField("gpu"):
                continue
            gpu = entry.progress.gpu
            for event in gpu.events:
                if event.fatal:
                    where = gpu.identity.pci_bus_id or "its GPU"
                    return (f"rank {rank}'s GPU {where} reported {event.kind.upper()} {event.code}"
                            f"{': ' + event.text if event.text else ''}")
        return None


class Blocked(Proof):
    name = BLOCKED
    evidence = ("every rank the others wait for: alive, no op in flight, and no CPU, I/O, kernel launch or "
                "disk wait anywhere in its process tree (RankActivity.quiet_ns)")
    wait = "blocked_s"

    def proves(self, probe: Findings, view: View, wait_s: float) -> str | None:
        culprits = probe.culprits
        if not culprits:
            return None
        quietest = []
        for rank in culprits:
            entry = view.ranks.get(rank)
            if entry is None:       # never reported, or its agent is silent: nothing is known
                return None
            p = entry.progress
            if not p.alive or not p.HasField("activity"):
                return None
            if p.HasField("oldest_in_flight"):
                # In a function the user named (known work), or waiting in another
                # group's op (the wait goes on elsewhere): the timeout judges it.
                return None
            quiet = p.activity.quiet_ns * 1e-9 + max(0.0, view.now - entry.received)
            if quiet < wait_s:
                return None
            quietest.append((rank, quiet))
        rank, quiet = min(quietest, key=lambda rq: rq[1])
        who = f"rank {rank}" if len(quietest) == 1 else f"{len(quietest)} ranks"
        return f"{who} waited for: no CPU, I/O or kernel launch for {quiet:.0f} s"


PROOFS: tuple[Proof, ...] = (Diverged(), Deadlocked(), Exited(), FrozenLink(), GpuFault(), Blocked(), StuckKernel())   # tried in this order


def evaluate(probe: Findings, view: View, waits: Waits) -> Finding | None:
    """The first evidence rule that proves ``probe``'s hang, its proof held
    its wait, or None. ``probe``: the hang rules' findings with
    ``waits.probe_s`` as timeout."""
    if not probe.hung:
        return None
    waited = max(g.max_age_s for g in probe.hung)
    for proof in PROOFS:
        wait_s = proof.wait_s(waits)
        if waited >= wait_s:
            found = proof.proves(probe, view, wait_s)
            if found is not None:
                return Finding(proof.name, found)
    return None


def _behind(probe: Findings, comm) -> bool:
    """Whether a member's lane stopped before the seq its group waits at."""
    for g in probe.hung:
        if g.op.comm_id == comm.comm_id and g.op.kind == comm.lane:
            at = probe.stuck_at(g.op)
            seq = at.seq if at is not None else g.op.seq
            return comm.last_started_seq < seq
    return False


def judge(view: View, timeout_s: float, silent_after_s: float, waits: Waits | None) -> Findings:
    """The hang rules' findings, hung only where a verdict is due: past
    ``timeout_s`` (the ``timeout`` rule, first in ``fired``), or earlier where
    an evidence rule proves it (that rule first). ``waits`` None: the
    timeout alone (--verdicts timeout)."""
    if waits is not None and waits.probe_s < timeout_s:
        probe = analyse(view, waits.probe_s, silent_after_s)
        if probe.hung and max(g.max_age_s for g in probe.hung) < timeout_s:
            proof = evaluate(probe, view, waits)
            if proof is not None:
                return dataclasses.replace(probe, fired=(proof,) + probe.fired)
    found = analyse(view, timeout_s, silent_after_s)
    if found.hung:
        found = dataclasses.replace(found, fired=(Finding(TIMEOUT, f"in flight past --hang-timeout {timeout_s:g} s"),)
                                    + found.fired)
    return found
