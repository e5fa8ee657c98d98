"""PerfWindow.message(series=...): one op, one series. Keys the series function
renames come together (two hook communicators of one group), keys it drops
leave ops and totals alike; GEMMs and host functions are never touched."""

from diag.perf.window import PerfWindow
from diag.records import format as fmt


def rec(name, kind, comm_id, dur, t, comm_size=2):
    return fmt.Record(fmt.EVENT_END, kind, 0, 0, 1, comm_id, 1, t, dur, 1000, 0, 1, comm_size, name)


def test_renamed_keys_merge_and_dropped_keys_leave():
    clock = lambda: 10**12   # noqa: E731
    window = PerfWindow(window_s=10, clock=clock)
    t = 10**12 - 10**9
    window.observe(0, fmt.PRODUCER_HOOK, [rec("ncclSend", fmt.KIND_P2P, 0xA, 2000, t),
                                          rec("ncclSend", fmt.KIND_P2P, 0xB, 4000, t + 10),
                                          rec("ncclAllReduce", fmt.KIND_COLLECTIVE, 0xC, 8000, t + 20)])
    window.observe(0, fmt.PRODUCER_PYTHON, [rec("all_reduce", fmt.KIND_COLLECTIVE, 0, 9000, t + 30),
                                            rec("optimizer.step", fmt.KIND_HOST_FUNC, 0, 100, t + 40)])
    group = {0xA: 7, 0xB: 7, 0xC: 0}   # the agent's ties: hook comm -> group id

    def series(producer, kind, comm_id):
        if producer == fmt.PRODUCER_PYTHON:
            return None if comm_id in group.values() else comm_id
        return group.get(comm_id, comm_id)

    msg = window.message(0, series=series)
    got = {(o.name, o.comm_id, o.producer): (o.count, o.timed_count, o.timed_ns, o.bytes, o.max_ns)
           for o in msg.ops}
    assert got == {("ncclSend", 7, fmt.PRODUCER_HOOK): (2, 2, 6000, 2000, 4000),
                   ("ncclAllReduce", 0, fmt.PRODUCER_HOOK): (1, 1, 8000, 1000, 8000),
                   ("optimizer.step", 0, fmt.PRODUCER_PYTHON): (1, 1, 100, 1000, 100)}
    totals = {(x.name, x.comm_id): (x.count, x.timed_ns) for x in msg.totals}
    assert totals == {("ncclSend", 7): (2, 6000), ("ncclAllReduce", 0): (1, 8000),
                      ("optimizer.step", 0): (1, 100)}
    # Without a series function, every key as recorded.
    assert len(window.message(0).ops) == 5
