"""timeline.json as the real Perfetto UI reads it (its WASM trace processor,
in headless chromium, offline; tests/timeline/perfetto_ui.py)."""

import json

import pytest

from diag.records import format as fmt
from diag.timeline import trace
from tests.timeline import perfetto_ui
from tests.timeline.test_trace import S, span, upload
from tests.timeline.trace_check import check

pytestmark = pytest.mark.skipif(perfetto_ui.available() is not None,
                                reason=str(perfetto_ui.available()))

PER_TRACK = """select p.pid as pid, t.tid as tid, p.name as process, t.name as thread,
  count(s.id) as n, sum(s.dur) as dur from slice s join thread_track tt on s.track_id = tt.id
  join thread t using(utid) join process p using(upid) group by 1, 2 order by 1, 2"""
ERRORS = "select name, value from stats where value > 0 and severity in ('error', 'data_loss')"


def perfetto_view(ui) -> dict:
    return {(r["pid"], r["tid"]): r for r in ui.query(PER_TRACK)}


def naive_process(pid: int) -> list[dict]:
    """Async all-reduces that overlap without nesting, all on one track, as a
    writer without lanes would put them: the control for Perfetto's check."""
    x = dict(cat="cpu", ph="X", pid=pid, tid=1, args={})
    return [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": "naive"}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "one track"}},
            dict(x, name="a", ts=8e6, dur=6e6), dict(x, name="b", ts=9e6, dur=3e6),
            dict(x, name="c", ts=11e6, dur=2e6)]


def test_perfetto_imports_every_span_on_the_track_and_rank_we_wrote():
    host_fn = span(0, 10 * S, "train_step", fmt.KIND_HOST_FUNC, seq=0)
    async_ar = [span(8 * S, 14 * S, seq=2), span(9 * S, 12 * S, seq=3), span(11 * S, 13 * S, seq=4)]
    gemms = [span(t * S, t * S + S // 2, "cublasGemmEx", fmt.KIND_GEMM, fmt.PRODUCER_HOOK,
                  fmt.FLAG_DEVICE_TIMED, seq=0) for t in (1, 2, 3)]
    # Two streams: an NCCL op overlapping another without nesting -> two lanes.
    nccl = [span(2 * S, 5 * S, "ncclAllReduce", producer=fmt.PRODUCER_HOOK, flags=fmt.FLAG_DEVICE_TIMED, seq=7),
            span(4 * S, 6 * S, "ncclAllReduce", producer=fmt.PRODUCER_HOOK, flags=fmt.FLAG_DEVICE_TIMED, seq=8)]
    launched = span(20 * S, 25 * S, "ncclAllReduce", producer=fmt.PRODUCER_HOOK, seq=9)
    ups = [upload(0, "host-a", 1_700_000_000 * S, [(0, [host_fn] + async_ar + gemms + nccl, [launched]),
                                                   (1, [span(S, 2 * S)], [])]),
           upload(1, "host-b", 1_700_000_000 * S + 3 * S, [(2, [span(S, 2 * S)], [])])]
    doc = trace.build(ups, job_id="j", request="r")
    ours = check(doc)
    control = {"traceEvents": naive_process(99), "displayTimeUnit": "ms"}
    with pytest.raises(AssertionError, match="overlaps"):
        check(control)
    doc["traceEvents"] += control["traceEvents"]
    with perfetto_ui.PerfettoUI(json.dumps(doc).encode()) as ui:
        theirs = perfetto_view(ui)
        errors = ui.query(ERRORS)
        args = ui.query("select s.name as name, a.key as key, a.display_value as value from slice s "
                        "join args a using(arg_set_id) where s.name = 'ncclAllReduce' and a.key in "
                        "('args.seq', 'args.comm', 'args.device_timed', 'args.in_flight')")
        r2 = ui.query("select s.ts as ts from slice s join thread_track tt on s.track_id = tt.id "
                      "join thread t using(utid) join process p using(upid) where p.name like 'rank 2 %'")
    # The control lost one slice to Perfetto, which is why tracks have lanes;
    # nothing of ours was dropped.
    assert errors == [{"name": "slice_drop_overlapping_complete_event", "value": 1}]
    assert theirs.pop((99, 1))["n"] == 2
    assert set(theirs) == set(ours)
    for key, events in ours.items():
        assert theirs[key]["n"] == len(events), key
        assert theirs[key]["dur"] == sum(round(e["dur"] * 1000) for e in events), key
    assert theirs[(1, 1)]["process"] == "rank 0 (host-a, local rank 0)"
    assert theirs[(3, 1)]["process"] == "rank 2 (host-b, local rank 0)"
    assert {theirs[(1, tid)]["thread"] for tid in (201, 202)} == {
        trace.TRACK_NCCL[1], trace.TRACK_NCCL[1] + " (2)"}
    seqs = sorted(int(a["value"]) for a in args if a["key"] == "args.seq")
    assert seqs == [7, 8, 9] and {a["value"] for a in args if a["key"] == "args.comm"} == {"0xabc"}
    assert sum(a["key"] == "args.in_flight" for a in args) == 1
    # host-b's clock is 3 s ahead: its rank 2 op, at monotonic 1 s, lands 3 s after rank 1's.
    r1 = min(e["ts"] for e in ours[(2, 1)])
    assert r2 == [{"ts": r2[0]["ts"]}] and r2[0]["ts"] - round(r1 * 1000) == 3 * S
