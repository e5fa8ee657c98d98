"""The agent's GPU health: which physical GPU each rank runs on, and NVML's
view of it (docs/gpu.md).

Two threads of the agent's own, never a training thread: one reads NVML for
the GPUs its ranks use every --gpu-sample-interval, one waits on NVML's XID
events (nvmlEventSetWait with a timeout). Without NVML (no driver, no
library, a container without the device) the agent says so once and
everything else works: ranks are still named by the UUID / PCI address their
CUDA runtime gave. Every loop catches, logs once and goes on.
"""

from __future__ import annotations

import os
import threading
import time

from diag.gpu import sample as gpu_sample
from diag.gpu.api import NOT_SAMPLED, GpuError, GpuHealth, GpuIdentity
from diag.gpu.nvml import NvmlQueryError, RealNvml, ReplayNvml, try_query
from diag.gpu.window import GpuWindow
from diag.records import format as fmt

XID_WAIT_S = 1.0        # how long one nvmlEventSetWait blocks: the thread's stop latency


def claimed_identity(rec: fmt.Record) -> GpuIdentity:
    """What a DEVICE record says, before NVML: the ordinal, UUID and bus id."""
    uuid = fmt.uuid_text(rec.comm_id, rec.seq) if rec.flags & fmt.DEVICE_HAS_UUID else ""
    pci = fmt.pci_text(rec.bytes) if rec.flags & fmt.DEVICE_HAS_PCI else ""
    return GpuIdentity(pci_bus_id=pci, uuid=uuid, cuda_device=rec.comm_rank)


def _claim_key(rec: fmt.Record) -> tuple:
    return (rec.comm_rank, rec.name, rec.comm_id, rec.seq, rec.bytes, rec.flags)


class GpuMonitor:
    """Owned by the Agent. ``claims`` is a callable returning {rank: DEVICE
    record} (the agent copies them under its lock)."""

    def __init__(self, config, log, stop: threading.Event, claims, clock=time.time):
        self.config = config
        self._log = log
        self._stop = stop
        self._claims = claims
        self._clock = clock
        self.window = GpuWindow(max(config.perf_window_s, 60.0))
        self.nvml = None
        self.why = ""                                  # why there is no NVML; "" when there is
        self._unsaid = ""                              # the no-NVML line, until a GPU shows up
        self._lock = threading.Lock()                  # guards window, _resolved, xid_totals
        self._resolved: dict[tuple, GpuIdentity] = {}  # DEVICE record key -> NVML's identity
        self._by_uuid: dict[str, int] = {}
        self.xid_totals: dict[tuple[int, int], int] = {}   # (index, xid) -> count since the agent started
        self.threads: list[threading.Thread] = []

    # -- lifecycle --------------------------------------------------------
    def start(self) -> None:
        if self.config.gpu_sample_interval_s <= 0:
            self.why = "GPU sampling is off (--gpu-sample-interval 0)"
            return
        try:
            self.nvml = ReplayNvml(self.config.nvml_replay) if self.config.nvml_replay else RealNvml()
        except GpuError as exc:
            self.why = str(exc)
            # Said once the job turns out to use a GPU (CUDA_VISIBLE_DEVICES, or
            # a rank's first DEVICE record): on a CPU job no NVML is no news.
            self._unsaid = (f"{exc}: verdicts name GPUs by what the CUDA runtime says and give no NVML cause; "
                            f"everything else works")
            env = getattr(self.config, "tool_env", None) or os.environ
            if env.get("CUDA_VISIBLE_DEVICES", "").strip() not in ("", "-1"):
                self._say_no_nvml()
            return
        count = try_query(self.nvml, "nvmlDeviceGetCount") or 0
        self._by_uuid = {gpu_sample.identity_of(self.nvml, i).uuid: i for i in range(count)}
        for name, target in (("gpu", self._sample_loop), ("xid", self._xid_loop)):
            thread = threading.Thread(target=target, name=f"xpu-diag-agent-{name}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- what the report carries ------------------------------------------
    def health_for(self, rec: fmt.Record | None) -> GpuHealth | None:
        """The rank's GpuHealth from its first DEVICE record; None without one."""
        if rec is None:
            return None
        if self._unsaid:
            self._say_no_nvml()
        with self._lock:
            identity = self._resolved.get(_claim_key(rec))
            if identity is None or identity.index < 0:
                return GpuHealth(identity or claimed_identity(rec), nvml=self.why or NOT_SAMPLED)
            return self.window.health(identity, self._clock(), self.why)

    def _say_no_nvml(self) -> None:
        line, self._unsaid = self._unsaid, ""
        if line:
            self._log(line, every=0)

    def xid_counts(self, index: int) -> dict[int, int]:
        """xid -> events on GPU ``index`` since the agent started."""
        with self._lock:
            return {x: n for (i, x), n in self.xid_totals.items() if i == index}

    # -- the sampling thread ----------------------------------------------
    def _sample_loop(self) -> None:
        while True:
            try:
                self.sample_once()
            except Exception as exc:   # never let the thread die
                self._log(f"GPU sampling failed: {exc!r}")
            if self._stop.wait(self.config.gpu_sample_interval_s):
                return

    def sample_once(self) -> None:
        """Resolve new DEVICE records, then read every GPU a rank uses."""
        claims = self._claims()
        for rec in claims.values():
            k = _claim_key(rec)
            if k not in self._resolved:
                identity = gpu_sample.resolve(self.nvml, claimed_identity(rec), rec.name)
                with self._lock:
                    self._resolved[k] = identity
                if identity.index < 0:
                    self._log(f"CUDA device {rec.comm_rank} ({rec.name or 'no CUDA_VISIBLE_DEVICES'}) "
                              f"matches no GPU NVML lists; it is named without NVML health", every=0)
        with self._lock:
            used = sorted({i.index for i in self._resolved.values() if i.index >= 0})
        for index in used:
            reading = gpu_sample.read(self.nvml, index, self._clock())
            with self._lock:
                self.window.add_sample(index, reading)

    # -- the XID thread ---------------------------------------------------
    def _xid_loop(self) -> None:
        why = self.nvml.watch_xid(sorted(self._by_uuid.values()))
        if why:
            self._log(f"{why}: HANG verdicts will not name XIDs", every=0)
            return
        while not self._stop.is_set():
            try:
                events = self.nvml.wait_xid(XID_WAIT_S)
            except NvmlQueryError as exc:
                self._log(f"XID events not available ({exc.message}): HANG verdicts will not name XIDs", every=0)
                return
            except Exception as exc:
                self._log(f"waiting for XID events failed: {exc!r}")
                self._stop.wait(XID_WAIT_S)
                continue
            for event in events:
                self._xid(event)

    def _xid(self, event: dict) -> None:
        index = self._by_uuid.get(event.get("gpu_uuid", ""), -1)
        code = int(event.get("xid", 0))
        with self._lock:
            got = self.window.add_xid(index, code, float(event.get("unix_s") or self._clock()))
            self.xid_totals[(index, code)] = self.xid_totals.get((index, code), 0) + 1
        self._log(f"GPU {event.get('gpu_uuid', '?')} (nvidia-smi index {index}): XID {code} ({got.text})",
                  every=0)
