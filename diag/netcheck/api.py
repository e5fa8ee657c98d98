"""netcheck contracts: the measurement record and the interface every test fills.

Implementations live in ``diag.netcheck.measure`` (one small module per test);
the bandwidth formulas they use are written down once in docs/netcheck.md.
"""

from __future__ import annotations

import abc
from dataclasses import asdict, dataclass, field
from typing import Any

# Exit codes (documented in docs/netcheck.md).
EXIT_HEALTHY = 0
EXIT_FAULTY = 1
EXIT_USAGE = 2
EXIT_CANNOT_RUN = 3
EXIT_INCOMPLETE = 4      # no node faulty, but --deadline left some unknown (never read as healthy)

# Verdicts and the rules that can fire (each failing record names one).
PASS, FAIL, INFO, UNKNOWN = "pass", "fail", "info", "unknown"   # unknown: never measured, never healthy
RULE_ABSOLUTE = "absolute"          # under --min-busbw / --min-bandwidth / the SKU profile
RULE_RATIO = "relative-ratio"       # under --rel-ratio x fleet median
RULE_MAD = "relative-mad"           # robust z-score against the fleet median/MAD
RULE_TIMEOUT = "timeout"            # a collective or the node did not finish in --timeout
RULE_ERROR = "error"                # the test raised (peer gone, CUDA error, ...)
RULE_PAIRING = "pairing"            # pinned by the rounds: failed next to a proven-healthy node
RULE_CHANNELS = "channels"          # switchbox: fewer than --min-channels working pairs
RULE_HEALTH = "nvml-health"         # NVML link-health finding


class NetcheckError(RuntimeError):
    """A failure that stops netcheck; the message is one user-facing line."""


@dataclass
class Measurement:
    """One record of faults.json (docs/netcheck.md lists the fields).

    ``link`` names what was measured: ``n1<->n3`` for a node pair, ``gpu0->gpu1``
    for a peer copy, ``host->gpu2`` for a host copy; ``gpu`` is the local GPU
    index where one GPU is meant. ``rule`` is empty unless the verdict is fail.
    """

    node: str
    metric: str
    value: float | None
    unit: str
    gpu: int | None = None
    link: str | None = None
    expected: float | None = None
    threshold: float | None = None
    verdict: str = PASS
    reason: str = ""
    rule: str = ""
    round: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not out["extra"]:
            del out["extra"]
        return out


@dataclass
class TestContext:
    """What a test gets at set-up: the group (if any) and where to put buffers.

    ``group`` is a c10d backend (ProcessGroupGloo / ProcessGroupNCCL) with
    ``size`` ranks; ``peer`` is the other rank for point-to-point tests.
    """

    __test__ = False                 # not a pytest test class, despite its name

    size_bytes: int
    device: Any                      # torch.device
    timeout_s: float
    group: Any = None
    rank: int = 0
    nranks: int = 1
    peer: int | None = None
    src_device: Any = None           # peer/host copies: where the data starts
    dst_device: Any = None


class BandwidthTest(abc.ABC):
    """One test, like nccl-tests' ``struct testColl``.

    Contract: :meth:`setup` allocates everything; :meth:`run_once` does one
    iteration and returns only when it is complete on this rank, raising
    (TimeoutError or RuntimeError) if it cannot complete within the context's
    timeout. It never blocks forever.
    """

    name: str = ""

    @abc.abstractmethod
    def setup(self, ctx: TestContext) -> None: ...

    @abc.abstractmethod
    def run_once(self) -> None: ...

    def bytes_moved(self, ctx: TestContext) -> int:
        """S in docs/netcheck.md: the message size per iteration (algbw = S / t)."""
        return ctx.size_bytes

    def bus_factor(self, nranks: int) -> float:
        """busbw = algbw x this factor (nccl-tests' PERFORMANCE.md)."""
        return 1.0

    def finish(self) -> None:
        """Wait for outstanding device work (timing boundary); default: nothing."""
