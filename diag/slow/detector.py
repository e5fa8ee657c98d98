"""Slow-rank episodes: a finding is declared once, after it held long enough,
and re-arms only after the rank was healthy for a whole window.

Pure apart from its own memory: ``update`` takes the collector's monotonic
clock as an argument, so tests drive it with a fake clock.
"""

from __future__ import annotations

import dataclasses

from diag.slow import rules
from diag.slow.api import RankWindow, SlowEvent, SlowFinding, Thresholds

# A window is judged only when every rank's figures cover this share of it:
# the first window after the job (or a rank) starts is warm-up.
FULL_SPAN = 0.9


@dataclasses.dataclass
class _Episode:
    first_seen: float
    last_seen: float
    declared: bool = False


class SlowDetector:
    """Turns per-window findings into SLOW events, one per episode.

    A finding must be seen at every evaluation for half a window before it is
    declared (one slow burst is not a slow rank). A declared episode ends when
    its finding has been absent for a whole window; the same finding after
    that is a new event.
    """

    def __init__(self, thresholds: Thresholds) -> None:
        self.th = thresholds
        self._episodes: dict[tuple, _Episode] = {}
        self.recovered: list[SlowFinding] = []   # filled by update(): episodes that ended
        # The declared episodes' keys (rule, ranks, comm_id), replaced whole at
        # each update, so the collector's /metrics reads it without a lock.
        self.open: tuple = ()

    def update(self, now: float, windows: dict[int, RankWindow]) -> list[SlowEvent]:
        self.recovered = []
        if not ready(windows, self.th):
            return []
        findings = {f.key: f for f in rules.judge(windows, self.th)}
        out = []
        for key, f in findings.items():
            ep = self._episodes.setdefault(key, _Episode(now, now))
            ep.last_seen = now
            if not ep.declared and now - ep.first_seen >= self.th.window_s / 2:
                ep.declared = True
                out.append(SlowEvent(f, ep.first_seen, now, (dict(windows),)))
        for key, ep in list(self._episodes.items()):
            if key in findings:
                continue
            if not ep.declared:
                del self._episodes[key]     # it must hold at every evaluation
            elif now - ep.last_seen >= self.th.window_s:
                del self._episodes[key]
                self.recovered.append(_finding_stub(key))
        self.open = tuple(key for key, ep in self._episodes.items() if ep.declared)
        return out


def ready(windows: dict[int, RankWindow], th: Thresholds) -> bool:
    """Judge only windows every rank fills: warm-up and restarts are skipped."""
    return len(windows) >= 2 and all(w.span_s >= FULL_SPAN * th.window_s for w in windows.values())


def _finding_stub(key: tuple) -> SlowFinding:
    rule, ranks, comm_id = key
    return SlowFinding(rule, ranks, 0.0, 0.0, "", "recovered", comm_id)
