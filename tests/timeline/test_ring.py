"""The agent's timeline ring: pairing, what is kept, and bounded memory."""

import tracemalloc

import pytest

from diag.records import format as fmt
from diag.timeline.ring import TimelineRing

S = 1_000_000_000


def header(rank=0, pid=100, producer=fmt.PRODUCER_PYTHON):
    return fmt.Header(4096, pid, rank, rank, 4, producer, 0, 0, 0)


def rec(event, op_id, t, dur=0, name="all_reduce", kind=fmt.KIND_COLLECTIVE, seq=0, flags=0,
        comm_id=0):
    return fmt.Record(event, kind, flags, 0, op_id, comm_id, seq, t, dur, 64, 0, 1, 4, name)


PY, HOOK = fmt.PRODUCER_PYTHON, fmt.PRODUCER_HOOK


def op(op_id, start, end, **kw):
    return [rec(fmt.EVENT_START, op_id, start, **kw),
            rec(fmt.EVENT_END, op_id, end, dur=end - start, **kw)]


def test_completed_and_in_flight_ops_of_two_producers():
    ring = TimelineRing(30 * S)
    ring.start_rank(header())   # NodeState: the rank's first region (it owns the regions)
    ring.apply(0, "py", PY, op(1, 10 * S, 11 * S, seq=1) + [rec(fmt.EVENT_START, 2, 12 * S, seq=2)])
    # hook: one device-timed GEMM (kept, placed by END - duration) and one
    # untimed (dropped: no device duration to draw).
    timed = rec(fmt.EVENT_END, 1, 20 * S, dur=2 * S, name="cublasGemmEx", kind=fmt.KIND_GEMM,
                flags=fmt.FLAG_DEVICE_TIMED)
    untimed = rec(fmt.EVENT_END, 2, 21 * S, name="cublasGemmEx", kind=fmt.KIND_GEMM)
    ring.apply(0, "hook", HOOK, [rec(fmt.EVENT_START, 1, 17 * S, name="cublasGemmEx", kind=fmt.KIND_GEMM),
                        timed, untimed])
    [snap] = ring.snapshot(now_ns=25 * S)
    assert [(s.name, s.start_ns, s.end_ns) for s in snap.spans] == [
        ("all_reduce", 10 * S, 11 * S), ("cublasGemmEx", 18 * S, 20 * S)]
    assert [(s.name, s.seq, s.start_ns, s.end_ns) for s in snap.in_flight] == [
        ("all_reduce", 2, 12 * S, 25 * S)]
    assert (snap.meta.rank, snap.meta.pid, snap.dropped_spans) == (0, 100, 0)


def test_window_follows_each_ranks_newest_record_so_a_stuck_rank_keeps_its_past():
    ring = TimelineRing(5 * S)
    ring.start_rank(header(rank=0))
    ring.start_rank(header(rank=1, pid=101))
    for i in range(20):   # rank 0: one op a second for 20 s; rank 1 stops at 8 s
        ring.apply(0, "a", PY, op(i + 1, i * S, i * S + S // 2))
        if i < 8:
            ring.apply(1, "b", PY, op(i + 1, i * S, i * S + S // 2))
    snaps = ring.snapshot(now_ns=300 * S)
    assert [s.start_ns // S for s in snaps[0].spans] == [14, 15, 16, 17, 18, 19]
    assert [s.start_ns // S for s in snaps[1].spans] == [2, 3, 4, 5, 6, 7]
    # --last: only what ended within that long before now.
    assert [s.start_ns // S for s in ring.snapshot(now_ns=20 * S, last_ns=3 * S)[0].spans] == \
        [17, 18, 19]
    assert snaps[0].dropped_spans == 0


def test_a_lost_end_does_not_leave_an_op_in_flight_forever():
    ring = TimelineRing(30 * S)
    ring.start_rank(header())
    ring.apply(0, "py", PY, [rec(fmt.EVENT_START, 1, S, seq=1, comm_id=7)] + op(2, 2 * S, 3 * S, seq=2,
                                                                               comm_id=7))
    assert ring.snapshot(4 * S)[0].in_flight == []


def test_a_p2p_end_never_drops_an_in_flight_collective_of_the_same_comm():
    # Pipeline stage on the hook: all_reduce seq 1 hangs while sends (p2p seq
    # 1..5) complete. The lanes count apart (docs/records.md "Lanes"), and
    # within the p2p lane the lost-END rule still holds.
    ring = TimelineRing(30 * S)
    ring.start_rank(header(producer=HOOK))
    recs = [rec(fmt.EVENT_START, 1, S, name="ncclAllReduce", seq=1, comm_id=7),
            rec(fmt.EVENT_START, 2, S, name="ncclSend", kind=fmt.KIND_P2P, seq=1, comm_id=7)]
    for seq in range(2, 6):
        recs += op(seq + 1, 2 * S, 3 * S, name="ncclSend", kind=fmt.KIND_P2P, seq=seq, comm_id=7,
                   flags=fmt.FLAG_DEVICE_TIMED)
    ring.apply(0, "hook", HOOK, recs)
    [snap] = ring.snapshot(4 * S)
    assert [(s.name, s.seq) for s in snap.in_flight] == [("ncclAllReduce", 1)]
    assert [(s.name, s.seq) for s in snap.spans] == [("ncclSend", seq) for seq in range(2, 6)]


def test_restarted_worker_drops_its_old_in_flight_ops():
    ring = TimelineRing(30 * S)
    ring.start_rank(header(pid=100))
    ring.apply(0, "old", PY, [rec(fmt.EVENT_START, 1, S, seq=1)])
    ring.start_rank(header(pid=200))   # NodeState: the new worker took the rank
    [snap] = ring.snapshot(2 * S)
    assert snap.in_flight == [] and snap.meta.pid == 200


def test_a_region_gone_drops_its_in_flight_ops_only():
    ring = TimelineRing(30 * S)
    ring.start_rank(header())
    ring.apply(0, "py", PY, [rec(fmt.EVENT_START, 1, S, seq=1)])
    ring.apply(0, "hook", HOOK, [rec(fmt.EVENT_START, 1, S, name="ncclAllReduce", seq=1)])
    ring.set_dropped(0, "py", 3)
    ring.set_dropped(0, "hook", 4)
    ring.remove_region(0, "py")
    [snap] = ring.snapshot(2 * S)
    assert [(s.name, s.producer) for s in snap.in_flight] == [("ncclAllReduce", HOOK)]
    assert snap.dropped_records == 7


def test_memory_is_bounded_by_the_count_cap_and_drops_are_counted():
    cap = 5000
    ring = TimelineRing(3600 * S, max_spans=cap, max_in_flight=64)
    ring.start_rank(header())
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(50_000):   # all within the window: only the cap bounds them
            t = i * 1000
            ring.apply(0, "py", PY, op(i + 1, t, t + 500, seq=i + 1, comm_id=(i % 3) << 40))
        for i in range(1000):     # starts that never end: the in-flight table is capped
            ring.apply(0, "py", PY, [rec(fmt.EVENT_START, 10**6 + i, 10**9, name=f"stuck{i}")])
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    [snap] = ring.snapshot(2 * 10**9)
    assert len(snap.spans) == cap and snap.dropped_spans == 50_000 - cap
    assert snap.spans[0].seq == 50_000 - cap + 1 and snap.spans[-1].seq == 50_000
    assert len(snap.in_flight) == 64
    per_span = used / cap
    print(f"timeline ring: {used / 1e6:.2f} MB for {cap} spans + 64 in flight "
          f"({per_span:.0f} B/span)")
    assert per_span < 400, f"{per_span:.0f} bytes per span"


@pytest.mark.parametrize("window, spans", [(0, 10), (10, 0)])
def test_caps_must_be_positive(window, spans):
    with pytest.raises(ValueError):
        TimelineRing(window, max_spans=spans)
