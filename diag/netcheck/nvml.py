"""NVML behind one small interface, with a recorder and a replay stand-in.

Every NVML answer netcheck uses goes through ``Nvml.query(fn, *args)``:
``fn`` is the pynvml function name, ``args`` are plain ints (GPU index,
link number, ...). Struct answers are turned into JSON-able values here, so
the same dict can be recorded on a real machine (``nvml_record``) and
replayed in tests (:class:`ReplayNvml`), key ``"fn[args...]"``.
A query NVML does not support raises :class:`NvmlQueryError`; callers treat
it as "not available here", never as a fault.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from diag.netcheck.api import NetcheckError

FORMAT_VERSION = 1
NVLINK_MAX_LINKS = 18           # H100/H200; links past the GPU's count answer an error
XID_EVENT = 8                   # nvmlEventTypeXidCriticalError


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
    """pynvml answers -> JSON values (structs to the fields netcheck reads)."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if hasattr(value, "busId"):
        return {"busId": _plain(value.busId)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class RealNvml:
    """pynvml on this machine. Raises NetcheckError (one line) if NVML cannot start."""

    def __init__(self) -> None:
        try:
            import pynvml
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - library missing, driver missing, ...
            raise NetcheckError(f"NVML is not available ({exc}); the switchbox check needs the NVIDIA "
                                "driver (or --nvml-replay FILE)") from None
        self.nv = pynvml
        self._handles: dict[int, Any] = {}
        self._events: Any = None

    def _handle(self, index: int) -> Any:
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
                return self._xid_events()
            if fn == "nvmlDeviceGetRetiredPages":
                return len(self.nv.nvmlDeviceGetRetiredPages(self._handle(args[0]), args[1]))
            handles = [self._handle(a) for a in args[:1]]
            rest = list(args[1:])
            if fn in ("nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus"):
                rest[0] = self._handle(rest[0])
            return _plain(getattr(self.nv, fn)(*handles, *rest))
        except self.nv.NVMLError as exc:
            raise NvmlQueryError(fn, getattr(exc, "value", None), str(exc)) from None

    def watch_xid(self, gpus: list[int]) -> None:
        """Start collecting critical XID events (read later by query('xidEvents'))."""
        try:
            self._events = self.nv.nvmlEventSetCreate()
            for g in gpus:
                self.nv.nvmlDeviceRegisterEvents(self._handle(g), XID_EVENT, self._events)
        except self.nv.NVMLError:
            self._events = None

    def _xid_events(self) -> list[dict[str, Any]]:
        if self._events is None:
            raise NvmlQueryError("xidEvents", None, "XID events not supported here")
        out = []
        while True:
            try:
                data = self.nv.nvmlEventSetWait_v2(self._events, 0)
            except self.nv.NVMLError:   # timeout: no more events queued
                return out
            out.append({"xid": int(data.eventData), "gpu_uuid": _plain(self.nv.nvmlDeviceGetUUID(data.device))})


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

    def watch_xid(self, gpus: list[int]) -> None:
        getattr(self.inner, "watch_xid", lambda g: None)(gpus)


class ReplayNvml:
    """Answers queries from a recorded file; a query never recorded raises NvmlQueryError."""

    def __init__(self, path: str):
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, json.JSONDecodeError) as exc:
            raise NetcheckError(f"--nvml-replay: cannot read {path} ({exc})") from None
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION or "answers" not in doc:
            raise NetcheckError(f"--nvml-replay: {path} is not an NVML recording (version {FORMAT_VERSION}); "
                                "make one with python3 -m diag.netcheck.nvml_record --out FILE")
        self.source = doc.get("source", "")
        self.answers = doc["answers"]

    def query(self, fn: str, *args: int) -> Any:
        answer = self.answers.get(key(fn, args))
        if answer is None:
            raise NvmlQueryError(fn, None, "not in the recording")
        if "error" in answer:
            raise NvmlQueryError(fn, answer["error"], answer.get("message", "error"))
        return answer["value"]

    def watch_xid(self, gpus: list[int]) -> None:
        """Replayed XID events were collected when recording."""


def try_query(nvml: Nvml, fn: str, *args: int) -> Any:
    """The answer, or None when NVML has no answer for it here."""
    try:
        return nvml.query(fn, *args)
    except NvmlQueryError:
        return None
