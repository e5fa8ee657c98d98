"""Why a GPU is slow, in the words of a verdict (pure; docs/gpu.md).

NVML's clocks event reasons (``nvmlDeviceGetCurrentClocksEventReasons``) say
why the SM clock is under its maximum. Idle and the application-clock
setting are not causes of slowness, nor is sync boost; the rest are named in
order of severity, the hardware ones first.
"""

from __future__ import annotations

import statistics
import time

from diag.gpu.api import GpuHealth

# bit -> words, most telling first (nvml.h nvmlClocksEventReason*)
REASONS = (
    (0x0000000000000080, "HW power brake slowdown"),
    (0x0000000000000040, "HW thermal slowdown"),
    (0x0000000000000008, "HW slowdown"),
    (0x0000000000000020, "SW thermal slowdown"),
    (0x0000000000000004, "SW power cap"),
    (0x0000000000000400, "reliability limit"),
    (0x0000000000000200, "board limit"),
    (0x0000000000000100, "display clock setting"),
)
NOT_CAUSES = 0x1 | 0x2 | 0x10    # GPU idle, application clocks setting, sync boost


def reason_names(mask: int | None) -> list[str]:
    """The named causes in a reasons bitmask, most telling first."""
    if not mask:
        return []
    return [words for bit, words in REASONS if mask & bit]


def clock_text(mhz: float) -> str:
    return f"{mhz:,.0f}"


def when(unix_s: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(unix_s))


def throttle_clause(health: GpuHealth | None, peers: list[GpuHealth]) -> str:
    """``throttled: HW thermal slowdown since 12:03:10, SM 1,215 MHz vs 1,980 on
    its peers``; ``no throttle reported`` when NVML shows no cause; "" when
    there is no NVML sample to judge from (then nothing is claimed)."""
    if health is None or health.latest is None:
        return ""
    sample = health.latest
    names = reason_names(sample.throttle_reasons)
    if not names:
        return "no throttle reported"
    text = f"throttled: {' and '.join(names[:2])}"
    if health.throttled_since_unix_s:
        text += f" since {when(health.throttled_since_unix_s)}"
    peer_clocks = [p.latest.sm_clock_mhz for p in peers
                   if p.latest is not None and p.latest.sm_clock_mhz and p.identity.key != health.identity.key]
    if sample.sm_clock_mhz:
        if peer_clocks:
            text += f", SM {clock_text(sample.sm_clock_mhz)} MHz vs {clock_text(statistics.median(peer_clocks))} on its peers"
        elif sample.sm_clock_max_mhz:
            text += f", SM {clock_text(sample.sm_clock_mhz)} MHz of {clock_text(sample.sm_clock_max_mhz)} max"
    return text


def fault_clause(health: GpuHealth | None) -> str:
    """The XIDs / fatal ECC in the window, latest first: ``XID 79 (GPU fell off
    the bus) at 12:03:10``; "" when there were none."""
    if health is None or not health.events:
        return ""
    events = sorted(health.events, key=lambda e: -e.unix_s)
    text = f"{events[0].phrase()} at {when(events[0].unix_s)}"
    if len(events) > 1:
        text += f" (+{len(events) - 1} more)"
    return text
