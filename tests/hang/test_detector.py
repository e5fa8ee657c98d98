"""HangDetector re-arms as soon as a hang clears (issue 41 item 4): a host
function called again (seq 0 like every call of it) is a new op, not the
hung one; a job that moves on past an op on no communicator is not hung in
it; a collector pause does not end an event. Driven by JobState and the real
rules with a fake clock."""

from diag.collector.state import JobState
from diag.hang import decide
from diag.hang.api import Limits
from diag.hang.detector import HangDetector
from diag.pb import collector_pb2 as pb
from tests.collector.fakes import ALL_REDUCE, node_report, rank_progress

T0 = 1000.0
TIMEOUT, SILENT = 4.0, 30.0
TICK = dict(name="tick", kind=pb.OP_KIND_HOST_FUNC)


def host_fn(age_s, completed, pid_base=1000):
    """Both ranks in the host function ``tick`` for ``age_s``, ``completed`` all-reduces done."""
    return node_report(0, [rank_progress(r, 2, pid=pid_base + r, op=TICK, age_s=age_s, started=completed,
                                         completed=completed) for r in (0, 1)])


def in_all_reduce(age_s, seq):
    return node_report(0, [rank_progress(r, 2, op=ALL_REDUCE, age_s=age_s, seq=seq, started=seq,
                                         completed=seq - 1) for r in (0, 1)])


class Judged:
    def __init__(self):
        self.state, self.detector = JobState(), HangDetector()

    def report(self, msg, at):
        self.state.ingest(msg, at)

    def look(self, now):
        snap = self.state.snapshot(now)
        return self.detector.update(decide.analyse(snap, Limits(TIMEOUT, SILENT)), snap)[:2]


def test_a_new_call_of_the_hung_host_function_rearms():
    j = Judged()
    j.report(host_fn(5.0, 10), T0)
    assert j.look(T0) == (True, False)
    j.report(host_fn(6.0, 10), T0 + 1)            # the same call, a second older
    assert j.look(T0 + 1) == (False, False)
    j.report(host_fn(0.001, 10), T0 + 2)          # a later call: same name, kind, group and seq 0
    assert j.look(T0 + 2) == (False, True) and j.detector.armed


def test_a_host_function_the_job_moved_past_rearms_and_is_not_declared_again():
    """A phantom (its END never came) or a side thread's call: the ranks
    complete all-reduces all the while, so the job does not wait for it."""
    j = Judged()
    j.report(host_fn(5.0, 10), T0)
    assert j.look(T0) == (True, False)
    j.report(host_fn(6.0, 11), T0 + 1)            # still in that call, one all-reduce more
    assert j.look(T0 + 1) == (False, True)
    j.report(host_fn(7.0, 12), T0 + 2)
    assert j.look(T0 + 2) == (False, False)       # the same op: no second HANG
    # The real stall after it: both ranks' oldest op is now an all-reduce, past the timeout.
    j.report(in_all_reduce(4.5, 57), T0 + 9)
    assert j.look(T0 + 9) == (True, False)


def test_a_host_function_hung_while_nothing_moves_stays_one_event():
    j = Judged()
    j.report(host_fn(5.0, 10), T0)
    assert j.look(T0) == (True, False)
    for t in range(1, 20):
        j.report(host_fn(5.0 + t, 10), T0 + t)
        assert j.look(T0 + t) == (False, False)
    assert not j.detector.armed


def test_a_collector_pause_does_not_end_the_event():
    j = Judged()
    j.report(in_all_reduce(5.0, 41), T0)
    assert j.look(T0) == (True, False)
    j.state.forgive_pause(20.0, T0 + 25)           # the collector was stopped for 20 s
    j.detector.forgive(20.0)
    assert j.look(T0 + 25) == (False, False)
    j.report(in_all_reduce(31.0, 41), T0 + 26)     # the agent's own clock: the true age
    assert j.look(T0 + 26) == (False, False)
