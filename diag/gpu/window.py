"""The agent's window of GPU samples and events (pure; no NVML, no threads).

Per GPU (NVML index): the samples of the last ``window_s`` seconds, when the
present throttle reasons first showed, and the XIDs / new uncorrected ECC
errors seen within the window. A verdict asks :meth:`GpuWindow.health`.
"""

from __future__ import annotations

import collections

from diag.gpu import causes, xid
from diag.gpu.api import GpuEvent, GpuHealth, GpuIdentity, GpuSample

MAX_EVENTS = 64             # per GPU; an XID storm keeps the newest


class GpuWindow:
    def __init__(self, window_s: float):
        self.window_s = window_s
        self._samples: dict[int, collections.deque] = {}
        self._since: dict[int, float] = {}          # index -> throttled since (unix s); absent: not throttled
        self._events: dict[int, collections.deque] = {}

    def add_sample(self, index: int, sample: GpuSample) -> None:
        samples = self._samples.setdefault(index, collections.deque())
        prev = samples[-1] if samples else None
        if causes.reason_names(sample.throttle_reasons):
            # The same reasons continue an episode; a change of reasons starts one.
            same = prev is not None and prev.throttle_reasons == sample.throttle_reasons
            if not same or index not in self._since:
                self._since[index] = sample.unix_s
        else:
            self._since.pop(index, None)
        if prev is not None:
            self._ecc_events(index, prev, sample)
        samples.append(sample)
        while samples and samples[0].unix_s < sample.unix_s - self.window_s:
            samples.popleft()

    def _ecc_events(self, index: int, prev: GpuSample, now: GpuSample) -> None:
        """Counters that moved between two samples: a fatal ECC sighting.
        What was there before the first sample is history, not this job's."""
        if prev.ecc_uncorrected is not None and (now.ecc_uncorrected or 0) > prev.ecc_uncorrected:
            new = now.ecc_uncorrected - prev.ecc_uncorrected
            self._add(index, GpuEvent(now.unix_s, "ecc", now.ecc_uncorrected,
                                      f"{new} new uncorrected ECC error{'s' if new > 1 else ''}", True))
        if now.remapped_rows_failed and prev.remapped_rows_failed is False:
            self._add(index, GpuEvent(now.unix_s, "ecc", now.ecc_uncorrected or 0, "row remapping failed", True))

    def add_xid(self, index: int, code: int, unix_s: float) -> GpuEvent:
        text, fatal = xid.describe(code)
        event = GpuEvent(unix_s, "xid", code, text, fatal)
        self._add(index, event)
        return event

    def _add(self, index: int, event: GpuEvent) -> None:
        self._events.setdefault(index, collections.deque(maxlen=MAX_EVENTS)).append(event)

    def health(self, identity: GpuIdentity, now_unix: float, nvml: str = "") -> GpuHealth:
        index = identity.index
        samples = self._samples.get(index)
        events = tuple(e for e in self._events.get(index, ()) if e.unix_s >= now_unix - self.window_s)
        return GpuHealth(identity, samples[-1] if samples else None, self._since.get(index, 0.0), events, nvml)

    def samples(self, index: int) -> list[GpuSample]:
        return list(self._samples.get(index, ()))
