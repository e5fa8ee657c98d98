"""Communicator lanes, one owner per rank, fingerprints and group identity in
the agent's NodeState (synchronous, fake clock; records as the producers write
them)."""

from diag.agent.comms import FINGERPRINT_DEPTH
from diag.records import format as fmt
from tests.agent.test_state import S, Clock, header, make, rec

HOOK = fmt.PRODUCER_HOOK


def lanes(rank):
    return {(c.comm_id, c.lane): (c.last_started_seq, c.last_completed_seq) for c in rank.comms}


def report_after(py_records, hook_records):
    """The one rank's report after its tracer's records, then its hook's, were read."""
    state = make()
    state.add_region("hook-r0", header(producer=HOOK))
    state.apply("py-r0", py_records)
    state.apply("hook-r0", hook_records)
    [rank] = state.report()
    return rank


def test_a_p2p_end_never_drops_an_in_flight_collective_of_the_same_comm():
    # Pipeline stage: all_reduce seq 1 hangs while sends (p2p seq 1..100) complete.
    state = make()
    state.add_region("hook-r0", header(producer=HOOK))
    recs = [rec(1, 1, 90 * S, name="ncclAllReduce", seq=1, comm_id=5)]
    for i in range(100):
        recs += [rec(1, 2 + i, 91 * S, name="ncclSend", seq=i + 1, comm_id=5, kind=fmt.KIND_P2P),
                 rec(2, 2 + i, 91 * S, name="ncclSend", seq=i + 1, comm_id=5, kind=fmt.KIND_P2P)]
    state.apply("hook-r0", recs)
    [rank] = state.report()
    assert (rank.oldest_in_flight.name, rank.oldest_in_flight.seq) == ("ncclAllReduce", 1)
    assert lanes(rank) == {(5, fmt.KIND_COLLECTIVE): (1, 0), (5, fmt.KIND_P2P): (100, 100)}


def test_the_stale_end_rule_still_applies_within_a_lane():
    state = make()
    state.apply("py-r0", [rec(1, 1, 90 * S, name="send", seq=1, kind=fmt.KIND_P2P),
                          rec(1, 2, 91 * S, name="send", seq=2, kind=fmt.KIND_P2P),
                          rec(2, 2, 92 * S, name="send", seq=2, kind=fmt.KIND_P2P)])
    assert not state.report()[0].HasField("oldest_in_flight")


def test_a_child_that_inherited_the_rank_cannot_take_it_over():
    said = []
    live = {10, 11}
    state = make(live=live, log=said.append)
    state.apply("py-r0", [rec(1, 1, 90 * S, seq=7)])
    for name in ("hook-r0-p11", "py-r0-p11"):            # a spawned child, newer, same RANK
        state.add_region(name, header(pid=11, start=95 * S))
    state.apply("hook-r0-p11", [rec(1, 1, 96 * S, seq=1)])
    [rank] = state.report()
    assert rank.pid == 10 and rank.oldest_in_flight.seq == 7
    assert len(said) == 1 and "pid 10 still owns the rank" in said[0] and "pid 11" in said[0]
    live.discard(10)                                       # now the owner is gone: a restart
    state.add_region("py-r0-p11", header(pid=11, start=95 * S))
    assert state.report()[0].pid == 11


def test_fingerprints_are_sent_only_while_stuck_and_stay_bounded():
    clock = Clock()
    state = make(clock)
    dtype_bf16 = (9 + 1) << fmt.FLAG_DTYPE_SHIFT
    recs = []
    for i in range(1, 101):
        recs += [rec(1, i, 90 * S, seq=i, nbytes=4 * i, flags=dtype_bf16, flops=fmt.pack_coll_args(0, -1)),
                 rec(2, i, 90 * S, seq=i, flops=fmt.pack_coll_args(0, -1))]
    recs.append(rec(1, 101, clock.now - S // 2, seq=101, flags=dtype_bf16, flops=fmt.pack_coll_args(2, 3)))
    state.apply("py-r0", recs)
    [rank] = state.report()
    assert [c.HasField("recent") for c in rank.comms] == [False]   # in flight for 0.5 s only
    assert [s.flops for s in rank.stats] == [0]            # packed args are not FLOPs
    clock.now += S
    [rank] = state.report()
    [comm] = rank.comms
    window = comm.recent
    assert len(window.ops) == FINGERPRINT_DEPTH and window.first_seq == 101 - FINGERPRINT_DEPTH + 1
    first, last = window.ops[0], window.ops[-1]
    assert (first.bytes, first.dtype, first.reduce_op, first.peer) == (4 * window.first_seq, 9, 0, -1)
    assert (last.reduce_op, last.peer) == (2, 3)
    assert (comm.last_started_seq, comm.last_completed_seq) == (101, 100)
    op = rank.oldest_in_flight
    assert (op.dtype, op.reduce_op, op.peer) == (9, 2, 3)


def test_hook_comm_is_reported_under_the_tracer_group_that_issued_it():
    state = make()
    state.add_region("hook-r0", header(producer=HOOK))
    group = fmt.Record(fmt.EVENT_GROUP, fmt.KIND_COLLECTIVE, 0, 0, 0, 77, 0, 80 * S, 0, 0, 0, 1, 4, "stage_pg")
    # The hook's start is read before the tracer's records: the tie waits.
    state.apply("hook-r0", [rec(1, 1, 91 * S, name="ncclAllReduce", seq=40, comm_id=0xABC)])
    state.apply("py-r0", [group, rec(1, 1, 90 * S, seq=3, comm_id=77), rec(2, 1, 92 * S, seq=3, comm_id=77)])
    [rank] = state.report()
    assert lanes(rank) == {(77, fmt.KIND_COLLECTIVE): (40, 0)}   # the tracer's own lane is shadowed
    assert rank.comms[0].group_name == "stage_pg"
    assert (rank.oldest_in_flight.comm_id, rank.oldest_in_flight.seq) == (77, 40)


def test_no_tie_without_an_enclosing_tracer_op_of_the_same_name():
    rank = report_after([rec(1, 1, 90 * S, seq=3, comm_id=77), rec(2, 1, 92 * S, seq=3, comm_id=77)],
                        [rec(1, 1, 91 * S, name="ncclAllGather", seq=1, comm_id=0xABC),
                         rec(1, 2, 93 * S, name="ncclAllReduce", seq=2, comm_id=0xABC)])
    assert set(lanes(rank)) == {(77, fmt.KIND_COLLECTIVE), (0xABC, fmt.KIND_COLLECTIVE)}


def test_a_lost_start_cuts_the_window_to_its_consecutive_tail():
    clock = Clock()
    state = make(clock)
    starts = [rec(1, i, 90 * S, seq=i) for i in (1, 2, 3, 5, 6)]   # seq 4's START was dropped
    state.apply("py-r0", starts)
    clock.now += 20 * S
    window = state.report()[0].comms[0].recent
    assert (window.first_seq, len(window.ops)) == (5, 2)


def test_two_hook_comms_of_one_group_report_one_lane_each():
    rank = report_after([rec(1, 1, 90 * S, seq=1, comm_id=77), rec(1, 2, 95 * S, seq=2, comm_id=77)],
                        [rec(1, 1, 91 * S, name="ncclAllReduce", seq=3, comm_id=0xA),
                         rec(1, 2, 96 * S, name="ncclAllReduce", seq=9, comm_id=0xB)])
    assert lanes(rank) == {(77, fmt.KIND_COLLECTIVE): (9, 0)}


def test_a_restart_seen_before_its_predecessor_exited_takes_over_at_the_exit():
    live = {10, 11}
    state = make(live=live)
    state.add_region("py-r0-p11", header(pid=11, start=95 * S))   # old pid 10 still exiting
    assert state.report()[0].pid == 10
    live.discard(10)
    state.mark_exited(10)
    state.apply("py-r0-p11", [rec(1, 1, 96 * S, seq=1)])
    [rank] = state.report()
    assert rank.pid == 11 and rank.alive and rank.oldest_in_flight.seq == 1


def group_rec(comm_id, name, size=4):
    return fmt.Record(fmt.EVENT_GROUP, fmt.KIND_COLLECTIVE, 0, 0, 0, comm_id, 0, 80 * S, 0, 0, 0, 1, size, name)


def test_an_unnumbered_tracer_p2p_op_reports_its_groups_p2p_lane_by_name():
    # gloo: the tracer alone, which does not number p2p ops (seq 0).
    clock = Clock()
    state = make(clock)
    state.apply("py-r0", [group_rec(77, "pp"),
                          rec(1, 1, 90 * S, name="send", seq=0, comm_id=77, kind=fmt.KIND_P2P),
                          rec(2, 1, 91 * S, name="send", seq=0, comm_id=77, kind=fmt.KIND_P2P),
                          rec(1, 2, 92 * S, name="send", seq=0, comm_id=77, kind=fmt.KIND_P2P)])
    clock.now += 20 * S
    [rank] = state.report()
    [comm] = rank.comms
    assert (comm.comm_id, comm.lane, comm.group_name, comm.comm_size) == (77, fmt.KIND_P2P, "pp", 4)
    assert (comm.last_started_seq, comm.last_completed_seq, comm.HasField("recent")) == (0, 0, False)
    assert (rank.oldest_in_flight.name, rank.oldest_in_flight.comm_id) == ("send", 77)


def test_a_hook_p2p_pair_communicator_is_reported_under_the_group_of_the_python_send():
    # torch gives each pair of peers its own 2-rank NCCL communicator.
    rank = report_after([group_rec(77, "pp"), rec(1, 1, 90 * S, name="isend", seq=0, comm_id=77, kind=fmt.KIND_P2P)],
                        [rec(1, 1, 91 * S, name="ncclSend", seq=5, comm_id=0xABC, kind=fmt.KIND_P2P, size=2)])
    assert lanes(rank) == {(77, fmt.KIND_P2P): (5, 0)}
    assert rank.comms[0].group_name == "pp"
    assert (rank.oldest_in_flight.comm_id, rank.oldest_in_flight.seq) == (77, 5)


def test_the_hooks_time_in_flight_is_reported_under_the_group_of_its_communicator():
    from diag.agent.state import NodeState
    from diag.perf.window import PerfWindow
    clock = Clock(100 * S)
    state = NodeState(clock, perf=PerfWindow(window_s=60, clock=clock), is_alive={10}.__contains__)
    state.add_region("py-r0", header())
    state.add_region("hook-r0", header(producer=HOOK))
    state.apply("py-r0", [group_rec(77, "pp"),
                          rec(1, 1, 90 * S, name="isend", seq=0, comm_id=77, kind=fmt.KIND_P2P)])
    timed = fmt.FLAG_DEVICE_TIMED
    state.apply("hook-r0", [rec(1, 1, 91 * S, name="ncclSend", seq=5, comm_id=0xABC, kind=fmt.KIND_P2P, size=2),
                            rec(2, 1, 93 * S, name="ncclSend", seq=5, comm_id=0xABC, kind=fmt.KIND_P2P, size=2,
                                dur=2 * S, flags=timed)])
    [rank] = state.report()
    busy = {(b.producer, b.comm_id, b.all_comms): b.busy_ns for b in rank.perf.comm_busy}
    assert busy == {(HOOK, 77, False): 2 * S, (HOOK, 0, True): 2 * S}
    assert [op.comm_id for op in rank.perf.ops if op.producer == HOOK] == [77]


def test_each_fingerprint_says_the_optimizer_step_its_op_started_in():
    # Two steps end at 92 s and 95 s (the tracer's optimizer.step ENDs); the
    # hook's ops come from another ring, read before those ENDs: the step is
    # said by time, not by the order the records were read in.
    clock = Clock()
    state = make(clock)
    state.add_region("hook-r0", header(producer=HOOK))
    state.apply("hook-r0", [rec(1, i, t * S, name="ncclAllReduce", seq=i, comm_id=0xA)
                            for i, t in enumerate((91, 93, 94, 96), start=1)])
    state.apply("py-r0", [rec(2, 0, t * S, name="optimizer.step", seq=0, kind=fmt.KIND_HOST_FUNC)
                          for t in (92, 95)])
    clock.now += 120 * S      # stuck: the window is sent
    comm = state.report()[0].comms[0]
    assert len(comm.recent.ops) == 4 and list(comm.recent_steps.step) == [0, 1, 1, 2]
    assert list(comm.recent_steps.into_step_ns) == [0, 1 * S, 2 * S, 1 * S]   # since the step before


def test_the_rank_says_its_place_in_each_group_its_framework_names():
    state = make()
    # As the tracer's GroupInfo writes them (RecordWriter.group): the rank's index in comm_rank.
    state.apply("py-r0", [fmt.Record(fmt.EVENT_GROUP, fmt.KIND_COLLECTIVE, 0, index, 0, cid, 0, 90 * S, 0, 0, 0, 1,
                                     2, name)
                          for name, cid, index in (("TENSOR_MODEL_PARALLEL_GROUP", 11, 1),
                                                   ("PIPELINE_MODEL_PARALLEL_GROUP", 12, 0), ("default", 0, 1))])
    assert state.report()[0].parallel_coords == "tp 1, pp 0"


def test_ranks_running_the_same_ops_at_other_times_send_windows_alike():
    # The collector compares members whose windows serialize alike once, as a
    # class: the step times travel beside the window, never inside it.
    windows = []
    for shift in (0, 0.3):
        clock = Clock()
        state = make(clock)
        state.apply("py-r0", [rec(2, 0, 92 * S, name="optimizer.step", seq=0,
                                  kind=fmt.KIND_HOST_FUNC)])
        state.apply("py-r0", [rec(1, i, int((90 + i + shift) * S), seq=i) for i in range(1, 5)])
        clock.now += 120 * S
        comm = state.report()[0].comms[0]
        windows.append((comm.recent.SerializeToString(), list(comm.recent_steps.into_step_ns)))
    assert windows[0][0] == windows[1][0] and windows[0][1] != windows[1][1]


def test_a_dropped_start_leaves_the_rank_at_its_true_seq():
    """Issue 41: the stalled rank was shown "at seq 0" though it had done 56,
    every START of its all-reduces crowded out of the ring; their ENDs came."""
    state = make()
    state.apply("py-r0", [rec(2, i, 90 * S + i, seq=i, comm_id=0) for i in range(1, 57)])
    assert lanes(state.report()[0]) == {(0, fmt.KIND_COLLECTIVE): (56, 56)}
    state.apply("py-r0", [rec(1, 57, 91 * S, seq=57), rec(2, 58, 92 * S, seq=55)])
    assert lanes(state.report()[0]) == {(0, fmt.KIND_COLLECTIVE): (57, 56)}   # never back
