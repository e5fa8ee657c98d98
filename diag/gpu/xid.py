"""XID numbers -> a few words and whether the hardware is at fault.

From NVIDIA's "XID Errors" catalogue (r580 driver docs) and DCGM's health
watches. "Fatal" means the GPU or its node needs service (reset, drain,
RMA): the node goes on the fault list. Application XIDs (13, 31, 43: an
illegal access, a page fault, a kernel that stopped) are named in verdicts
but keep the node in service.
"""

from __future__ import annotations

# xid -> (text, fatal)
XIDS: dict[int, tuple[str, bool]] = {
    13: ("graphics engine exception (the application's kernel faulted)", False),
    31: ("GPU memory page fault (the application's access)", False),
    43: ("GPU stopped processing (the application's kernel)", False),
    45: ("preemptive cleanup after an earlier error", False),
    48: ("double-bit ECC error", True),
    61: ("internal micro-controller breakpoint", True),
    62: ("internal micro-controller halt", True),
    63: ("ECC page retirement or row remapping recorded", False),
    64: ("ECC page retirement or row remapping failed", True),
    68: ("video processor exception", False),
    74: ("NVLink error", True),
    79: ("GPU fell off the bus", True),
    92: ("high single-bit ECC error rate", True),
    94: ("contained ECC error", False),
    95: ("uncontained ECC error", True),
    109: ("context switch timeout", False),
    119: ("GSP RPC timeout", True),
    120: ("GSP error", True),
    121: ("C2C link corrected error", False),
    140: ("unrecovered ECC error", True),
    143: ("GPU initialization failure", True),
    154: ("GPU recovery action changed (reset or reboot needed)", True),
}


def describe(xid: int) -> tuple[str, bool]:
    """(text, fatal) for an XID; unknown numbers are named, not judged fatal."""
    return XIDS.get(xid, ("see NVIDIA's XID catalogue", False))
