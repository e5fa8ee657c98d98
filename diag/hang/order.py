"""The order a rank runs its groups' collectives in, and whether its current
op keeps it.

Training code runs the same collectives in the same order every step: the
gradients' all-reduce on the data-parallel group, then the loss on a logging
group, say. Merging one rank's lanes by when each op started (its own clock,
``StepTimes.start_ns``) gives that order as a sequence of (group, op)
labels. Where the sequence before the rank's current op repeats with some
period, the label one period back is what this point of a step runs; a rank
whose current op is another broke the order (it skipped or added an op).
Groups are renumbered by first appearance, so ranks in different groups of
one kind (tensor-parallel groups) share a pattern and are judged once.
"""

from __future__ import annotations

import dataclasses
import typing

from diag.hang.api import KIND_COLLECTIVE

KEPT, BROKE, UNKNOWN = "kept", "broke", "unknown"
# A period is believed only where the history shows it twice: one step
# alone cannot tell a pattern from chance.
MIN_PERIODS = 2


@dataclasses.dataclass(frozen=True)
class Order:
    """What one rank's history says of its current op. ``expected`` and
    ``actual`` are (comm_id, op name) in the rank's own group ids; ``period``
    the ops per repeat (0: none seen)."""

    verdict: str
    period: int = 0
    expected: tuple[int, str] | None = None
    actual: tuple[int, str] | None = None


def history(progress) -> list[tuple[int, int, str, int]]:
    """(start_ns, comm_id, op name, seq) of the rank's collective ops that
    every lane's window still covers, oldest first. A lane whose window
    lost its oldest ops (it runs more ops per step, and kept its last 64)
    bounds the others: before its first op the merge would miss its ops and
    invent an order. One that holds the lane from its first seq bounds
    nothing."""
    lanes, since = [], 0
    for comm in progress.comms:
        if comm.lane != KIND_COLLECTIVE or not comm.recent.ops:
            continue
        starts = comm.recent_steps.start_ns
        if len(starts) != len(comm.recent.ops):   # an agent without start times: no order known
            return []
        first = comm.recent.first_seq
        lanes.append([(t, comm.comm_id, fp.name, first + i) for i, (t, fp) in enumerate(zip(starts, comm.recent.ops))])
        if first > 1:
            since = max(since, starts[0])
    merged = sorted(op for lane in lanes for op in lane if op[0] >= since)
    return merged


def judge(progress, comm_id: int, seq: int, cache: dict | None = None) -> Order:
    """Whether the rank's op ``seq`` of group ``comm_id`` (its oldest in
    flight) is the op its earlier steps run at this point. Ops it started
    after it (async ones, prefetches) are past that point and not asked.
    ``cache``: verdicts by renumbered pattern, shared across ranks."""
    ops = history(progress)
    at = next((i for i in range(len(ops) - 1, -1, -1) if (ops[i][1], ops[i][3]) == (comm_id, seq)), None)
    if at is None:
        return Order(UNKNOWN)    # the op is outside what the windows still hold
    ops = ops[:at + 1]
    number: dict[int, int] = {}
    labels = tuple((number.setdefault(c, len(number)), name) for _, c, name, _ in ops)
    found = cache.get(labels) if cache is not None else None
    if found is None:
        found = _judge_labels(labels)
        if cache is not None:
            cache[labels] = found
    verdict, period, expected_at = found
    if verdict == UNKNOWN:
        return Order(UNKNOWN)
    by_number = {n: c for c, n in number.items()}
    expected = labels[expected_at]
    return Order(verdict, period, (by_number[expected[0]], expected[1]), (comm_id, ops[-1][2]))


def _judge_labels(labels: tuple) -> tuple[str, int, int]:
    """(verdict, period, index of the label expected now) for ``labels``,
    whose last is the current op."""
    past, now = labels[:-1], labels[-1]
    period = _period(past)
    if not period:
        return UNKNOWN, 0, 0
    at = len(labels) - 1 - period
    return (KEPT if labels[at] == now else BROKE), period, at


def _period(seq: typing.Sequence) -> int:
    """The period of ``seq``'s longest periodic tail, the shortest such;
    0 where no tail repeats ``MIN_PERIODS`` times. A step's set-up ops (a
    first broadcast) may precede the pattern: only the tail is asked to
    repeat."""
    n = len(seq)
    best, best_len = 0, 0
    for p in range(1, n // MIN_PERIODS + 1):
        i = n - 1
        while i >= p and seq[i] == seq[i - p]:
            i -= 1
        tail = n - 1 - i + p      # positions that repeat, and the period they repeat
        if tail >= MIN_PERIODS * p and tail > best_len:
            best, best_len = p, min(tail, n)
    return best
