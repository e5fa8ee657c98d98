"""The Trace Event writer: processes, tracks, lanes, clocks; and the checker."""

import json

import pytest

from diag.pb import collector_pb2 as pb
from diag.records import format as fmt
from diag.timeline import trace, wire
from diag.timeline.api import RankMeta, RankSnapshot, Span
from tests.timeline.trace_check import check

S = 1_000_000_000


def span(start, end, name="all_reduce", kind=fmt.KIND_COLLECTIVE, producer=fmt.PRODUCER_PYTHON,
         flags=0, seq=1):
    return Span(start, end, name, kind, producer, flags, 0xabc, seq, 4096, 0)


def upload(node, host, offset, ranks, collected=0):
    snaps = [RankSnapshot(RankMeta(r, r % 2, 4, 1000 + r), spans, inflight, 0)
             for r, spans, inflight in ranks]
    up = wire.build_upload(snaps, offset_ns=offset, job_id="j", request_id="req", node_rank=node,
                           hostname=host, window_ns=30 * S)
    up.collected_unix_ns = collected
    return up


def test_one_process_per_rank_named_and_sorted_with_cpu_and_gpu_tracks():
    gemm = span(5 * S, 6 * S, "cublasGemmEx", fmt.KIND_GEMM, fmt.PRODUCER_HOOK,
                fmt.FLAG_DEVICE_TIMED, seq=0)
    nccl = span(5 * S, 7 * S, "ncclAllReduce", fmt.KIND_COLLECTIVE, fmt.PRODUCER_HOOK,
                fmt.FLAG_DEVICE_TIMED, seq=3)
    stuck = span(8 * S, 8 * S, "ncclAllReduce", producer=fmt.PRODUCER_HOOK, seq=4)
    ups = [upload(1, "host-b", 1_700_000_000 * S, [(2, [span(S, 2 * S)], []),
                                                   (3, [gemm, nccl], [stuck._replace(end_ns=9 * S)])]),
           upload(0, "host-a", 1_700_000_000 * S + S // 2, [(0, [span(S, 2 * S)], []),
                                                              (1, [span(S, 2 * S)], [])])]
    doc = trace.build(ups, job_id="j", request="req")
    tracks = check(json.loads(trace.dumps(doc)))
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {1: "rank 0 (host-a, local rank 0)", 2: "rank 1 (host-a, local rank 1)",
                     3: "rank 2 (host-b, local rank 0)", 4: "rank 3 (host-b, local rank 1)"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads[(4, trace.TRACK_GEMM[0])] == trace.TRACK_GEMM[1]
    [g] = tracks[(4, trace.TRACK_GEMM[0])]
    [n] = tracks[(4, trace.TRACK_NCCL[0])]
    [s] = tracks[(4, trace.TRACK_LAUNCHED[0])]
    assert (g["name"], g["dur"], g["args"]["device_timed"]) == ("cublasGemmEx", 1e6, True)
    assert n["args"] == {"kind": "collective", "comm": "0xabc", "seq": 3, "bytes": 4096,
                         "device_timed": True}
    assert s["args"]["in_flight"] and s["dur"] == 1e6
    # Clocks: each node's own offset. host-a's offset is 0.5 s larger, so its
    # rank 0 op (monotonic 1 s) lands 0.5 s after host-b's rank 2 op.
    r0, r2 = tracks[(1, 1)][0], tracks[(3, 1)][0]
    assert r0["ts"] - r2["ts"] == pytest.approx(5e5)
    assert doc["otherData"]["clock_origin_unix_ns"] % S == 0
    assert r2["ts"] == (1_700_000_000 * S + S - doc["otherData"]["clock_origin_unix_ns"]) / 1000


def test_overlapping_spans_go_to_lanes_so_every_track_nests():
    # An async all_reduce outliving the host function that issued it.
    spans = [span(0, 10 * S, "train_step", fmt.KIND_HOST_FUNC, seq=0),
             span(2 * S, 3 * S, seq=1), span(8 * S, 14 * S, seq=2),
             span(9 * S, 12 * S, seq=3), span(11 * S, 13 * S, seq=4)]
    doc = trace.build([upload(0, "h", 0, [(0, spans, [])])], job_id="j", request="r")
    tracks = check(doc)
    lanes = {tid: [e["args"].get("seq") for e in events] for (_, tid), events in tracks.items()}
    assert lanes == {1: [None, 1, 4], 2: [2, 3]}   # seq 3 nests in seq 2, not in train_step
    assert sum(len(v) for v in lanes.values()) == len(spans)


def test_a_rank_sent_twice_keeps_the_newer_upload_and_missing_nodes_are_listed():
    old = upload(0, "h", 0, [(0, [span(S, 2 * S, seq=1)], [])], collected=1)
    new = upload(0, "h", 0, [(0, [span(S, 2 * S, seq=1), span(3 * S, 4 * S, seq=2)], [])],
                 collected=2)
    doc = trace.build([new, old], job_id="j", request="r", nodes_missing=[3])
    assert len(check(doc)[(1, 1)]) == 2 and doc["otherData"]["nodes_missing"] == [3]


@pytest.mark.parametrize("breakage, message", [
    (lambda d: d["traceEvents"].append({"name": "x", "ph": "B", "pid": 1, "tid": 1, "ts": 0}),
     "phase"),
    (lambda d: d["traceEvents"][-1].pop("dur"), "dur"),
    (lambda d: d["traceEvents"][-1].update(ts="5"), "ts"),
    (lambda d: d["traceEvents"].append(dict(d["traceEvents"][-1], ts=5e5)), "overlaps"),
    (lambda d: d["traceEvents"].extend([dict(d["traceEvents"][-1], ts=3e6),
                                        dict(d["traceEvents"][-1], ts=2e6)]), "goes back"),
    (lambda d: d["traceEvents"].pop(0), "process_name"),
])
def test_the_checker_refuses_what_viewers_would_misdraw(breakage, message):
    doc = trace.build([upload(0, "h", 0, [(0, [span(S, 2 * S)], [])])], job_id="j", request="r")
    check(doc)
    breakage(doc)
    with pytest.raises(AssertionError, match=message):
        check(doc)


def test_no_upload_at_all_still_gives_a_valid_document():
    doc = trace.build([], job_id="j", request="r", nodes_missing=[0])
    check(doc)
    assert doc["traceEvents"] == [] and doc["otherData"]["nodes_missing"] == [0]


def test_upload_carries_wall_clock_start_and_duration():
    up = upload(0, "h", 10 * S, [(0, [span(S, 3 * S)], [span(4 * S, 6 * S, seq=2)])])
    assert [(s.start_unix_ns, s.dur_ns, s.in_flight) for s in up.ranks[0].spans] == [
        (11 * S, 2 * S, False), (14 * S, 2 * S, True)]
    assert isinstance(up, pb.TimelineUpload) and abs(wire.clock_offset_ns()) > 0
