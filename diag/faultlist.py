"""The fault list: netcheck writes it, ``xpu_timer_launch --fault-list`` reads it.

File format (JSON, ``version`` 1)::

    {
      "version": 1,
      "tool": "netcheck",
      "created_unix": 1763812345.2,          # seconds since the epoch
      "faulty": [{"node": "node3", "reason": "busbw 1.2 GB/s < 20 GB/s (--min-busbw)",
                  "hostname": "node3", "node_rank": 3, "addr": "10.0.0.4"}],
      "records": [                           # one per measurement, healthy ones too
        {"node": "node3", "gpu": null, "link": "node3<->node1", "metric": "busbw",
         "value": 1.2, "unit": "GB/s", "expected": 22.0, "threshold": 20.0,
         "verdict": "fail", "reason": "...", "rule": "absolute"}
      ]
    }

``node`` is the display name (unique in the list: ``vm#3`` where hostnames
repeat); ``hostname``, ``node_rank`` and ``addr`` are there when netcheck saw
the node, so a reader can match a node by any of them (:meth:`FaultList.match`).
Readers only need ``version``, ``created_unix`` and ``faulty``; ``records``
is the evidence, kept so that nothing measured is lost. Writers go through
:func:`write`, which writes a temp file in the same directory and renames it,
so a reader never sees half a file.

A list read from a file is input from whoever could write it, and its words
reach a terminal: :func:`load` escapes control characters in every name
(``\x1b`` stays visible, it is never sent), cuts each reason to one line of
``REASON_MAX`` characters, and takes ``created_unix`` only when it is a finite
number no more than ``CLOCK_SKEW_S`` in the future: a later date would never
go stale (a list dated 1e18 was trusted forever). The full text stays in the file.
"""

from __future__ import annotations

import json
import math
import os
import time
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Iterable

from diag.common.atomic import write_atomic

EXIT_FAULTY_NODE = 75  # EX_TEMPFAIL: "try again elsewhere"; the launcher's exit code
VERSION = 1
REASON_MAX = 200       # characters of a reason as printed; the file keeps it whole
NAME_MAX = 255         # a host name is at most 253
CLOCK_SKEW_S = 300.0   # a list this far ahead of our clock is still believed (nodes' clocks differ)
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, limit: int | None = REASON_MAX) -> str:
    """``text`` safe for a terminal and one line: control and format characters
    (ESC, newlines, C1 codes, bidi overrides) are shown escaped (``\\x1b``), and
    more than ``limit`` characters end in an ellipsis. Idempotent."""
    raw = text if limit is None else text[:limit + 1]  # escapes only lengthen: never read a 1 MB reason whole
    out = "".join(_escape(ch) if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in raw)
    if limit is not None and (len(out) > limit or len(text) > limit):
        out = out[:limit - 1] + "…"
    return out


class FaultListError(ValueError):
    """A fault list that cannot be used; the message is one user-facing line naming the file."""


@dataclass(frozen=True)
class FaultEntry:
    """One faulty node: its display name, why, and how else to recognise it."""

    node: str
    reason: str
    hostname: str = ""
    node_rank: int | None = None
    addr: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.node, "reason": self.reason}
        out.update({k: v for k, v in (("hostname", self.hostname), ("node_rank", self.node_rank),
                                      ("addr", self.addr)) if v not in ("", None)})
        return out


def merge_entries(entries: Iterable[FaultEntry]) -> list[FaultEntry]:
    """One entry per node name, reasons joined with `` | `` (first identity seen is kept)."""
    out: dict[str, FaultEntry] = {}
    for e in entries:
        old = out.get(e.node)
        out[e.node] = e if old is None else FaultEntry(e.node, f"{old.reason} | {e.reason}", old.hostname or e.hostname,
                                                       old.node_rank if old.node_rank is not None else e.node_rank,
                                                       old.addr or e.addr)
    return [out[n] for n in sorted(out)]


@dataclass
class FaultList:
    """A loaded fault list.

    ``faulty`` maps node name -> reason. ``records`` holds the raw measurement
    records (dicts) as written; readers other than reports can ignore them.
    """

    created_unix: float
    faulty: dict[str, str] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    path: str = ""
    entries: list[FaultEntry] = field(default_factory=list)

    def match(self, node_name: str = "", hostname: str = "",
              addrs: Iterable[str] = ()) -> tuple[FaultEntry, str] | None:
        """The entry for this node and what matched (``XPU_TIMER_NODE_NAME``, ``hostname``
        or ``address``), or None. The node name is tried first, then the address (unique
        even where hostnames repeat), then the hostname, short or qualified."""
        entries = self.entries or [FaultEntry(n, r) for n, r in self.faulty.items()]
        if node_name:
            for e in entries:
                if e.node == node_name or _short(e.node) == _short(node_name):
                    return e, "XPU_TIMER_NODE_NAME"
        addrs = {a for a in addrs if a}
        for e in entries:
            if e.addr and e.addr in addrs:
                return e, "address"
        if hostname:
            for e in entries:
                # An entry that carries an address names one node of several sharing the hostname.
                if e.addr and addrs:
                    continue
                if _short(e.hostname or e.node.split("#", 1)[0]) == _short(hostname):
                    return e, "hostname"
        return None

    def reason_for(self, names: Iterable[str]) -> str | None:
        """Reason if any of ``names`` is marked faulty, else None.

        A name matches an entry exactly, or by short host name (``n3`` matches
        ``n3.cluster.local`` either way round), because schedulers and
        ``gethostname()`` disagree on whether names are qualified.
        """
        wanted = [n for n in names if n]
        for name in wanted:
            if name in self.faulty:
                return self.faulty[name]
        shorts = {n.split(".", 1)[0] for n in wanted}
        for node, reason in self.faulty.items():
            if node.split(".", 1)[0] in shorts:
                return reason
        return None

    def age_s(self, now: float | None = None) -> float:
        """Seconds since the list was made (negative if the clock went back)."""
        return (time.time() if now is None else now) - self.created_unix

    def stale(self, max_age_s: float, now: float | None = None) -> str | None:
        """Why the list is too old to trust (a phrase: "is 3.0 h old"), or None.
        A list dated more than CLOCK_SKEW_S ahead of ``now`` has no known age
        (a wrong clock, or a date made up so that it never goes stale): stale."""
        age = self.age_s(now)
        if age < -CLOCK_SKEW_S:
            return (f"is dated {-age / 3600:.3g} h in the future (more than the {CLOCK_SKEW_S:g} s of clock "
                    f"skew allowed), so its age is unknown")
        return f"is {age / 3600:.1f} h old" if age > max_age_s else None


def _short(name: str) -> str:
    return name.split(".", 1)[0]


def _fail(path: str, why: str) -> FaultListError:
    return FaultListError(f"fault list {path}: {why}")


def _parse_faulty(path: str, raw: Any, shown: bool = False) -> list[FaultEntry]:
    """``shown``: a list read from a file, whose words are printed: names
    escaped, reasons escaped and cut to REASON_MAX (see :func:`printable`)."""
    if not isinstance(raw, list):
        raise _fail(path, "'faulty' must be a list of {node, reason}; regenerate it with netcheck --output")
    out: list[FaultEntry] = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or not isinstance(entry.get("node"), str) or not entry["node"]:
            raise _fail(path, f"faulty[{i}] has no node name; regenerate it with netcheck --output")
        rank = entry.get("node_rank")
        e = FaultEntry(entry["node"], str(entry.get("reason") or "marked faulty"),
                       str(entry.get("hostname") or ""), rank if isinstance(rank, int) else None,
                       str(entry.get("addr") or ""))
        if shown:
            e = FaultEntry(printable(e.node, NAME_MAX), printable(e.reason), printable(e.hostname, NAME_MAX),
                           e.node_rank, printable(e.addr, NAME_MAX))
        out.append(e)
    return out


def parse(text: str, path: str = "<string>", now: float | None = None) -> FaultList:
    """Parse fault-list JSON text. Raises FaultListError (one line, naming
    ``path``); a list dated more than CLOCK_SKEW_S after ``now`` (default:
    the clock) is refused."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(path, f"not JSON ({exc.msg} at line {exc.lineno}); regenerate it with netcheck --output") from None
    if not isinstance(doc, dict):
        raise _fail(path, "not a fault list (top level is not an object)")
    version = doc.get("version")
    if version != VERSION:
        raise _fail(path, f"version {version!r} is not supported (this xpu-diag reads version {VERSION})")
    created = doc.get("created_unix")
    if not isinstance(created, (int, float)) or isinstance(created, bool):
        raise _fail(path, "missing or bad 'created_unix'; regenerate it with netcheck --output")
    if not math.isfinite(created):   # json reads NaN and Infinity; either would never go stale
        raise _fail(path, f"'created_unix' is {created}, not a time; regenerate it with netcheck --output")
    ahead = created - (time.time() if now is None else now)
    if ahead > CLOCK_SKEW_S:   # never stale, so it would be trusted forever; or a wrong clock
        raise _fail(path, f"'created_unix' {created:g} is {ahead / 3600:.3g} h in the future (more than the "
                          f"{CLOCK_SKEW_S:g} s of clock skew allowed); check this node's clock and the one "
                          f"that wrote it, or regenerate it with netcheck --output")
    records = doc.get("records", [])
    if not isinstance(records, list):
        raise _fail(path, "'records' must be a list")
    entries = _parse_faulty(path, doc.get("faulty"), shown=True)
    return FaultList(float(created), {e.node: e.reason for e in entries}, records, path, entries)


def load(path: str | os.PathLike) -> FaultList:
    """Read and validate a fault list file. Raises FaultListError (one line, naming the file)."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise _fail(path, f"cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise _fail(path, "not UTF-8 text; regenerate it with netcheck --output") from None
    return parse(text, path)


def to_document(faulty: dict[str, str] | Iterable[FaultEntry], records: list[dict[str, Any]],
                created_unix: float | None = None, **extra: Any) -> dict[str, Any]:
    """Build the JSON document (see the module docstring); ``extra`` adds top-level keys."""
    doc: dict[str, Any] = {
        "version": VERSION,
        "tool": "netcheck",
        "created_unix": time.time() if created_unix is None else created_unix,
        "faulty": [e.to_dict() for e in _entries(faulty)],
        "records": records,
    }
    doc.update(extra)
    return doc


def _entries(faulty: dict[str, str] | Iterable[FaultEntry]) -> list[FaultEntry]:
    if isinstance(faulty, dict):
        return [FaultEntry(n, r) for n, r in sorted(faulty.items())]
    return merge_entries(faulty)


def entries_of(doc: dict[str, Any]) -> list[FaultEntry]:
    """The typed entries of a document built by :func:`to_document`."""
    return _parse_faulty("<document>", doc["faulty"])


def write_document(path: str | os.PathLike, doc: dict[str, Any]) -> None:
    """Write a document built by :func:`to_document` atomically (temp file, fsync, rename)."""
    write_atomic(os.fspath(path), (json.dumps(doc, indent=1) + "\n").encode("utf-8"), fsync=True)


def write(path: str | os.PathLike, faulty: dict[str, str] | Iterable[FaultEntry], records: list[dict[str, Any]],
          created_unix: float | None = None, **extra: Any) -> None:
    """Write a fault list atomically: temp file in the same directory, fsync, rename."""
    path = os.fspath(path)
    doc = to_document(faulty, records, created_unix, **extra)
    write_atomic(path, (json.dumps(doc, indent=1) + "\n").encode("utf-8"), fsync=True)
