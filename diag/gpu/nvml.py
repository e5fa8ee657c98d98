"""NVML behind one small interface, with a recorder and a replay stand-in.

Every NVML answer xpu-diag uses (netcheck's switchbox check, the agent's GPU
health) goes through ``Nvml.query(fn, *args)``: ``fn`` is the pynvml function
name, ``args`` are plain ints (GPU index, link number, ...). Struct answers are
turned into JSON-able values here, so the same dict can be recorded on a real
machine (``diag.gpu.record``, ``diag.netcheck.nvml_record``) and replayed in
tests (:class:`ReplayNvml`), key ``"fn[args...]"``.

A recording may also carry a ``timeline``: answers that change ``after_s``
seconds into the replay (a clock that drops, a throttle reason that appears)
and the XID events that arrive then (docs/gpu.md, "Recordings").

A query NVML does not support raises :class:`NvmlQueryError`; callers treat
it as "not available here", never as a fault.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Protocol

from diag.gpu.api import GpuError

FORMAT_VERSION = 1
NVLINK_MAX_LINKS = 18           # H100/H200; links past the GPU's count answer an error
XID_EVENT = 8                   # nvmlEventTypeXidCriticalError
XID_KEY = "xidEvents[]"


class NvmlQueryError(Exception):
    """NVML answered an error for this query (not supported, no permission, ...)."""

    def __init__(self, fn: str, code: int | None, message: str):
        super().__init__(f"{fn}: {message}")
        self.code, self.message = code, message


class Nvml(Protocol):
    def query(self, fn: str, *args: int) -> Any: ...


def key(fn: str, args: tuple) -> str:
    return f"{fn}{json.dumps(list(args))}"


def _plain(value: Any) -> Any:
    """pynvml answers -> JSON values (structs to the fields xpu-diag reads)."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if hasattr(value, "busId"):
        return {"busId": _plain(value.busId)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class RealNvml:
    """pynvml on this machine. Raises GpuError (one line) if NVML cannot start.

    NVML itself is thread-safe: the agent's sampling thread and its XID thread
    share one instance."""

    def __init__(self) -> None:
        try:
            import pynvml
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - library missing, driver missing, ...
            raise GpuError(f"NVML is not available ({exc})") from None
        self.nv = pynvml
        self._handles: dict[int, Any] = {}
        self._events: Any = None
        self._lock = threading.Lock()

    def _handle(self, index: int) -> Any:
        with self._lock:
            if index not in self._handles:
                self._handles[index] = self.nv.nvmlDeviceGetHandleByIndex(index)
            return self._handles[index]

    def query(self, fn: str, *args: int) -> Any:
        try:
            if fn == "nvmlDeviceGetCount":
                return self.nv.nvmlDeviceGetCount()
            if fn == "nvmlSystemGetDriverVersion":
                return _plain(self.nv.nvmlSystemGetDriverVersion())
            if fn == "xidEvents":
                return self.wait_xid(0.0)
            if fn == "nvmlDeviceGetRetiredPages":
                return len(self.nv.nvmlDeviceGetRetiredPages(self._handle(args[0]), args[1]))
            handles = [self._handle(a) for a in args[:1]]
            rest = list(args[1:])
            if fn in ("nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus"):
                rest[0] = self._handle(rest[0])
            return _plain(getattr(self.nv, fn)(*handles, *rest))
        except self.nv.NVMLError as exc:
            raise NvmlQueryError(fn, getattr(exc, "value", None), str(exc)) from None

    def watch_xid(self, gpus: list[int]) -> str:
        """Start collecting critical XID events; returns "" or why not (one line)."""
        try:
            self._events = self.nv.nvmlEventSetCreate()
            for g in gpus:
                self.nv.nvmlDeviceRegisterEvents(self._handle(g), XID_EVENT, self._events)
        except self.nv.NVMLError as exc:
            self._events = None
            return f"XID events not available ({exc})"
        return ""

    def wait_xid(self, timeout_s: float) -> list[dict[str, Any]]:
        """XID events queued since the last call, waiting up to ``timeout_s``
        for the first (nvmlEventSetWait); [] when none came."""
        if self._events is None:
            raise NvmlQueryError("xidEvents", None, "XID events not supported here")
        out = []
        wait_ms = int(timeout_s * 1000)
        while True:
            try:
                data = self.nv.nvmlEventSetWait_v2(self._events, wait_ms)
            except self.nv.NVMLError:   # timeout: no more events queued
                return out
            wait_ms = 0
            out.append({"xid": int(data.eventData), "gpu_uuid": _plain(self.nv.nvmlDeviceGetUUID(data.device)),
                        "unix_s": time.time()})


class RecordingNvml:
    """Wraps a real Nvml and remembers every answer, errors included."""

    def __init__(self, inner: Nvml):
        self.inner = inner
        self.answers: dict[str, Any] = {}

    def query(self, fn: str, *args: int) -> Any:
        try:
            value = self.inner.query(fn, *args)
        except NvmlQueryError as exc:
            self.answers[key(fn, args)] = {"error": exc.code, "message": exc.message}
            raise
        self.answers[key(fn, args)] = {"value": value}
        return value

    def watch_xid(self, gpus: list[int]) -> str:
        return getattr(self.inner, "watch_xid", lambda g: "")(gpus) or ""

    def wait_xid(self, timeout_s: float) -> list[dict[str, Any]]:
        return self.inner.wait_xid(timeout_s)


def load_recording(path: str) -> dict:
    """The recording's document; GpuError (one line naming the file) if it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GpuError(f"cannot read the NVML recording {path} ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION or not isinstance(doc.get("answers"), dict):
        raise GpuError(f"{path} is not an NVML recording (version {FORMAT_VERSION}); make one with "
                       f"python -m diag.gpu.record --out FILE")
    steps = doc.get("timeline", [])
    if not isinstance(steps, list) or not all(
            isinstance(s, dict) and isinstance(s.get("after_s"), (int, float)) and isinstance(s.get("answers"), dict)
            for s in steps):
        raise GpuError(f"{path}: 'timeline' must be a list of {{after_s, answers}}")
    return doc


class ReplayNvml:
    """Answers queries from a recording; a query never recorded raises NvmlQueryError.

    Time starts when the replay is made (``clock``, monotonic seconds): a
    timeline step's answers replace the base answers from its ``after_s`` on,
    and its XID events (``xidEvents[]``) are handed out once, by ``wait_xid``.
    The base ``xidEvents[]`` answer is static (netcheck collects it once)."""

    def __init__(self, path: str, clock=time.monotonic):
        doc = load_recording(path)
        self.path = path
        self.source = doc.get("source", "")
        self.answers = doc["answers"]
        self._steps = sorted(doc.get("timeline", []), key=lambda s: s["after_s"])
        self._clock = clock
        self._t0 = clock()
        self._wall0 = time.time()
        self._xid_given = 0          # steps whose XID events were handed out
        self._lock = threading.Lock()

    def _due(self) -> list[dict]:
        elapsed = self._clock() - self._t0
        return [s for s in self._steps if s["after_s"] <= elapsed]

    def query(self, fn: str, *args: int) -> Any:
        k = key(fn, args)
        answer = None
        for step in self._due():
            answer = step["answers"].get(k, answer)
        if answer is None:
            answer = self.answers.get(k)
        if answer is None:
            raise NvmlQueryError(fn, None, "not in the recording")
        if "error" in answer:
            raise NvmlQueryError(fn, answer["error"], answer.get("message", "error"))
        return answer["value"]

    def watch_xid(self, gpus: list[int]) -> str:
        """Replayed XID events were collected when recording."""
        return ""

    def wait_xid(self, timeout_s: float) -> list[dict[str, Any]]:
        """The XID events of the steps that came due since the last call, each
        once and stamped with the time its step came due; waits up to
        ``timeout_s`` (in slices, so a stopping agent is not held) for one."""
        deadline = self._clock() + timeout_s
        while True:
            with self._lock:
                due = self._due()
                fresh = due[self._xid_given:]
                self._xid_given = len(due)
            out = []
            for step in fresh:
                for event in (step["answers"].get(XID_KEY) or {}).get("value") or []:
                    out.append({**event, "unix_s": self._wall0 + step["after_s"]})
            left = deadline - self._clock()
            if out or left <= 0:
                return out
            time.sleep(min(left, 0.05))


def try_query(nvml: Nvml, fn: str, *args: int) -> Any:
    """The answer, or None when NVML has no answer for it here."""
    try:
        return nvml.query(fn, *args)
    except NvmlQueryError:
        return None
