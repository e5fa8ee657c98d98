"""The type check of hang.json (docs/event-dir.md) for the fields the viewer reads.

hang.json is input like any dump: a copied or hand-edited one may hold valid
JSON of the wrong types. The viewer reads it only when every field it uses has
its documented type; otherwise it is read like a missing one, with one note.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any, Callable

Check = Callable[[Any], bool]


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _rank(v: Any) -> bool:
    return _int(v) and v >= 0


def _opt(check: Check) -> Check:
    return lambda v: v is None or check(v)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _number(v: Any) -> bool:
    return (_int(v) or isinstance(v, float)) and math.isfinite(v)


def _list(check: Check) -> Check:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


def _rows(fields: dict[str, Check], required: tuple[str, ...] = ("rank",)) -> Check:
    """A list of objects whose ``fields`` (where present; ``required`` always) pass."""
    def ok(row: Any) -> bool:
        return (isinstance(row, dict) and all(k in row for k in required)
                and all(check(row[k]) for k, check in fields.items() if k in row))
    return _list(ok)


# group: the process group's name as the HANG line gives it (null: unnamed, the id is said instead)
_OP = {"op": _opt(_str), "comm_id": _opt(lambda v: _int(v) or _str(v)), "group": _opt(_str), "seq": _opt(_int)}

# field -> (its check, the type as said in the note); None is allowed for each
# (the collector writes the rank sections as null until their rows are built).
FIELDS: dict[str, tuple[Check, str]] = {
    "world_size": (lambda v: _int(v) and v > 0, "a whole number > 0"),
    "declared_unix": (_number, "a number (seconds)"),
    "verdict": (_str, "a string"),
    "dumps": (lambda v: isinstance(v, dict) and all(isinstance(k, str) and k.isdigit() and _list(_str)(n)
                                                    for k, n in v.items()), "an object of rank -> file names"),
    "culprits": (_list(_rank), "a list of ranks"),
    "ranks": (_rows({"rank": _rank, "pid": _opt(_int), **_OP, "last_completed_seq": _opt(_int)}),
              "a list of {rank, pid, op, comm_id, group, seq, last_completed_seq}"),
    "never_entered": (_rows({"rank": _rank, **_OP, "last_started_seq": _opt(_int)}),
                      "a list of {rank, op, comm_id, group, seq, last_started_seq}"),
    "suspects": (_rows({"rank": _rank, "reason": _opt(_str), "last_op": _opt(_str)}),
                 "a list of {rank, reason, last_op}"),
    "mismatch": (lambda v: isinstance(v, dict) and _opt(_str)(v.get("summary")), "an object with a summary string"),
    "groups": (_rows({"comm_id": lambda v: _int(v) or _str(v), "name": _opt(_str), "ranks": _opt(_str)},
                     required=("comm_id",)), "a list of {comm_id, name, ranks}"),
}


_SHORT = reprlib.Repr()   # bounded: a wrong 100,000-row list is not printed whole
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 2, 3, 3
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 30


def problem(doc: Any) -> str | None:
    """What is wrong with ``doc`` for the viewer (one phrase), or None when it can be read."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    for name, (check, wanted) in FIELDS.items():
        value = doc.get(name)
        if value is not None and not check(value):
            return f"'{name}' must be {wanted}, not {_SHORT.repr(value)}"
    return None
