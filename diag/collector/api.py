"""The hang rules' contracts, where the collector's parts have always found
them: they live in diag/hang/api.py (the rules are a feature package)."""

from diag.hang.api import (KIND_COLLECTIVE, KIND_NAMES, KIND_P2P, Ahead, Findings, GroupLabel,  # noqa: F401
                           HungGroup, IdleStall, Mismatch, NeverEntered, OpKey, SilentAgent, Skip, StuckAt,
                           Suspect, Variant)
