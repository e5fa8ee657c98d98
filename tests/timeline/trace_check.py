"""A strict check of the Trace Event Format subset that timeline.json uses.

What Perfetto's JSON importer and chrome://tracing need, checked strictly:
the JSON Object Format; per phase the required fields and their types;
metadata events only of the four kinds we write, each once; every process and
every track named; per track, ``ts`` never goes back in file order and two
"X" events either nest or do not overlap (compared in integer nanoseconds,
as the writer rounds to 3 decimals of a microsecond). Returns the events per
(pid, tid) so tests can go on from there; raises AssertionError naming the
first event that breaks a rule.
"""

from __future__ import annotations

import json
import numbers

META_ARGS = {"process_name": ("name", str), "process_sort_index": ("sort_index", int),
             "thread_name": ("name", str), "thread_sort_index": ("sort_index", int)}


def _ns(value: float) -> int:
    return round(value * 1000)


def _check_common(i: int, e: dict) -> None:
    assert isinstance(e, dict), f"event {i}: not an object"
    assert isinstance(e.get("name"), str) and e["name"], f"event {i}: name must be a non-empty string"
    assert isinstance(e.get("pid"), int) and not isinstance(e["pid"], bool), f"event {i}: pid int"
    assert isinstance(e.get("args", {}), dict), f"event {i}: args must be an object"


def _check_meta(i: int, e: dict, seen: set) -> None:
    assert e["name"] in META_ARGS, f"event {i}: unknown metadata {e['name']!r}"
    key, typ = META_ARGS[e["name"]]
    value = e.get("args", {}).get(key)
    assert isinstance(value, typ) and not isinstance(value, bool), \
        f"event {i}: {e['name']} needs args.{key} of type {typ.__name__}"
    if e["name"].startswith("thread_"):
        assert isinstance(e.get("tid"), int), f"event {i}: {e['name']} needs an int tid"
    ident = (e["name"], e["pid"], e.get("tid"))
    assert ident not in seen, f"event {i}: duplicate metadata {ident}"
    seen.add(ident)


def _check_slice(i: int, e: dict) -> None:
    assert isinstance(e.get("tid"), int), f"event {i}: X needs an int tid"
    for field in ("ts", "dur"):
        value = e.get(field)
        assert isinstance(value, numbers.Real) and not isinstance(value, bool) and value >= 0, \
            f"event {i}: X needs a number {field} >= 0, got {value!r}"
    assert isinstance(e.get("cat"), str) and e["cat"], f"event {i}: X needs a cat string"
    json.dumps(e["args"], allow_nan=False)


def check(doc) -> dict[tuple[int, int], list[dict]]:
    if isinstance(doc, (bytes, str)):
        doc = json.loads(doc)
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), \
        "not the JSON Object Format: no traceEvents list"
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns"), "displayTimeUnit must be ms or ns"
    assert isinstance(doc.get("otherData", {}), dict), "otherData must be an object"
    seen_meta: set = set()
    tracks: dict[tuple[int, int], list[dict]] = {}
    for i, e in enumerate(doc["traceEvents"]):
        _check_common(i, e)
        ph = e.get("ph")
        if ph == "M":
            _check_meta(i, e, seen_meta)
        elif ph == "X":
            _check_slice(i, e)
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
        else:
            raise AssertionError(f"event {i}: phase {ph!r} is not one timeline.json writes (X, M)")
    pids = {pid for pid, _ in tracks}
    for pid in pids:
        assert ("process_name", pid, None) in seen_meta, f"pid {pid} has no process_name"
    for pid, tid in tracks:
        assert ("thread_name", pid, tid) in seen_meta, f"track {pid}/{tid} has no thread_name"
    for key, events in tracks.items():
        _check_track(key, events)
    return tracks


def _check_track(key, events: list[dict]) -> None:
    stack: list[int] = []      # end times (ns) of the open slices
    last_ts = None
    for e in events:
        start, end = _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])
        assert last_ts is None or start >= last_ts, f"track {key}: ts goes back at {e}"
        last_ts = start
        while stack and stack[-1] <= start:
            stack.pop()
        assert not stack or end <= stack[-1], \
            f"track {key}: {e['name']} at {e['ts']} overlaps its parent without nesting"
        stack.append(end)
