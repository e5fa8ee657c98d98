"""Verdict rules: an absolute floor and a robust rule against the fleet median.

Every failing verdict names the rule that fired (``api.RULE_*``), the
threshold it used and the figure it expected, so the fault list explains itself.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from importlib import resources
from typing import Any, Sequence

from diag.netcheck.api import FAIL, PASS, RULE_ABSOLUTE, RULE_MAD, RULE_RATIO, NetcheckError

MAD_SCALE = 1.4826        # MAD -> standard deviation for normal data
MAD_MIN_SAMPLES = 5       # below this the MAD is noise; only the ratio rule applies
MAD_MAX_FRACTION = 0.8    # the MAD rule also needs value < 0.8 x median, so a tight fleet
                          # does not fail a node for being 3% slower


@dataclass(frozen=True)
class Thresholds:
    """Rule parameters. ``minimum`` is the absolute floor (None: no absolute rule)."""

    minimum: float | None = None
    rel_ratio: float = 0.5
    mad_z: float = 3.5
    typical: float | None = None


@dataclass(frozen=True)
class Verdict:
    verdict: str
    rule: str
    threshold: float | None
    expected: float | None
    reason: str


def fleet_median(values: Sequence[float]) -> float:
    """The upper median: for two pairs, one slow, the reference is the fast one."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def judge(value: float, fleet: Sequence[float], th: Thresholds, metric: str, unit: str) -> Verdict:
    """Judge one figure (higher is better) against ``th`` and the fleet's figures.

    ``fleet`` holds every figure of the same metric so far, ``value`` included.
    The absolute rule wins over the relative ones when both fire.
    """
    median = fleet_median(fleet) if fleet else None
    expected = th.typical if th.typical is not None else median
    if th.minimum is not None and value < th.minimum:
        return Verdict(FAIL, RULE_ABSOLUTE, th.minimum, expected,
                       f"{metric} {value:.3g} {unit} < floor {th.minimum:.3g} {unit}")
    if median is None or len(fleet) < 2:
        return Verdict(PASS, "", th.minimum, expected, "")
    if value < th.rel_ratio * median:
        limit = th.rel_ratio * median
        return Verdict(FAIL, RULE_RATIO, limit, median,
                       f"{metric} {value:.3g} {unit} < {th.rel_ratio:g} x fleet median {median:.3g} {unit}")
    if len(fleet) >= MAD_MIN_SAMPLES and value < MAD_MAX_FRACTION * median:
        mad = statistics.median(abs(v - median) for v in fleet)
        z = (median - value) / (MAD_SCALE * mad) if mad > 0 else float("inf")
        if z > th.mad_z:
            limit = median - th.mad_z * MAD_SCALE * mad
            return Verdict(FAIL, RULE_MAD, limit, median,
                           f"{metric} {value:.3g} {unit} is {z:.1f} MADs under fleet median {median:.3g} {unit}")
    return Verdict(PASS, "", th.minimum, expected, "")


def load_profiles() -> dict[str, Any]:
    """The shipped per-SKU profiles (diag/netcheck/profiles/gpus.json)."""
    text = resources.files("diag.netcheck").joinpath("profiles/gpus.json").read_text(encoding="utf-8")
    return json.loads(text)["profiles"]


def select_profile(name: str | None, device_name: str | None) -> dict[str, Any] | None:
    """``name`` 'none' -> None; 'auto' -> matched on the GPU name; else that SKU.

    Raises NetcheckError naming --profile when the SKU is unknown.
    """
    profiles = load_profiles()
    if name in (None, "none"):
        return None
    if name == "auto":
        for profile in profiles.values():
            if device_name and any(m.lower() in device_name.lower() for m in profile["match"]):
                return profile
        return None
    for key, profile in profiles.items():
        if key.lower() == name.lower():
            return profile
    raise NetcheckError(f"--profile: unknown SKU {name!r}; known: auto, none, {', '.join(profiles)}")
