"""The one parser of sizes (``64M``, ``1G``) and durations (``30s``, ``5m``).

Errors name the option that was wrong, so callers pass it in.
"""

from __future__ import annotations

import re

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
               "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
               "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
_DURATION_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6,
                   "m": 60.0, "min": 60.0, "h": 3600.0}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


# The largest values anything downstream takes: a size is an int64 (struct
# fields, mmap, gRPC's own int64 options); a duration goes to time.sleep,
# threading waits and gRPC deadlines, and a year is beyond any real timeout
# while far inside what each of them accepts.
MAX_SIZE = (1 << 63) - 1
MAX_DURATION_S = 365 * 24 * 3600.0


class UnitError(ValueError):
    """A size or duration that does not parse; the message is user-facing."""


def parse_size(text: str | int, option: str, maximum: int = MAX_SIZE,
               maximum_text: str = f"{MAX_SIZE} (an int64)") -> int:
    """``"64M"`` -> 67108864 (binary units). Must be positive and at most
    ``maximum`` (said as ``maximum_text``); raises UnitError naming ``option``."""
    if isinstance(text, int):
        value, unit = text, ""
    else:
        match = _NUMBER.match(str(text))
        if not match or match.group(2).lower() not in _SIZE_UNITS:
            raise UnitError(f"{option}: {text!r} is not a size; use e.g. 4096, 64M or 1G")
        number, unit = match.group(1), match.group(2).lower()
        value = int(number) if number.isdigit() else float(number)  # whole numbers stay exact
    scaled = value * _SIZE_UNITS[unit]
    if not scaled <= maximum:  # also inf (1e400 reads as inf)
        raise UnitError(f"{option}: {text!r} is too large; at most {maximum_text}")
    size = int(scaled)
    if size <= 0:
        raise UnitError(f"{option}: {text!r} must be a positive size, e.g. 64M")
    return size


def parse_duration(text: str | float | int, option: str) -> float:
    """``"30s"`` -> 30.0, ``"5m"`` -> 300.0, ``"250ms"`` -> 0.25. Must be
    positive and at most a year (``MAX_DURATION_S``); raises UnitError naming ``option``."""
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        match = _NUMBER.match(str(text))
        if not match or match.group(2).lower() not in _DURATION_UNITS:
            raise UnitError(f"{option}: {text!r} is not a duration; use e.g. 300, 30s or 5m")
        value, unit = float(match.group(1)), match.group(2).lower()
    seconds = value * _DURATION_UNITS[unit]
    if not seconds <= MAX_DURATION_S:  # also NaN and inf (1e400 reads as inf)
        raise UnitError(f"{option}: {text!r} is too long; at most 8760h (a year)")
    if not seconds > 0:
        raise UnitError(f"{option}: {text!r} must be a positive duration, e.g. 30s")
    return seconds


def format_size(nbytes: int) -> str:
    """``4`` -> ``"4 B"``, ``98566144`` -> ``"94 MiB"`` (binary units, as
    :func:`parse_size` reads them; exact bytes below 1 KiB)."""
    value, unit = float(nbytes), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{int(nbytes)} B" if unit == "B" else f"{value:.3g} {unit}"
