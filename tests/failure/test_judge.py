"""The FAILED verdict's pure logic (diag/failure), fed RankProgress messages as the collector holds them."""

from __future__ import annotations

import signal

from diag.failure import judge
from diag.failure.api import RankExit, short_error
from diag.pb import collector_pb2 as pb

AR = "all_reduce"


def rank(r, started, *, alive=False, exit=None, seen=0.0, ops=None, world=3, group="default"):
    """A rank's report: its default-group lane at ``started``, with fingerprints
    ``ops`` [(name, bytes)] from seq 1 when given."""
    p = pb.RankProgress(rank=r, world_size=world, pid=100 + r, alive=alive, exited_unix=seen)
    comm = p.comms.add(comm_id=0, last_started_seq=started, last_completed_seq=started - 1, comm_size=world,
                       lane=pb.OP_KIND_COLLECTIVE, group_name=group)
    if ops is not None:
        comm.recent.first_seq = 1
        comm.recent.ops.extend(pb.Fingerprint(name=n, bytes=b, dtype=7, reduce_op=0, peer=-1) for n, b in ops)
    if exit is not None:
        p.exit.CopyFrom(exit)
    return p


def steps(n, skip_at=None):
    """Two per-parameter all-reduces a step (172 B, 8 B); the 172 B one skipped at step ``skip_at``."""
    out = []
    for step in range(1, n + 1):
        if step != skip_at:
            out.append((AR, 172))
        out.append((AR, 8))
    return out


def test_a_size_mismatch_blames_the_minority_at_the_divergence_seq():
    term = pb.RankExit(signal=signal.SIGTERM)
    ranks = {0: rank(0, 19, ops=steps(10)[:19], exit=term, seen=5.0),
             1: rank(1, 19, ops=steps(10, skip_at=10)[:19], exit=pb.RankExit(signal=signal.SIGABRT,
                                                                                  torchrun_root=True), seen=5.0),
             2: rank(2, 19, ops=steps(10)[:19], exit=term, seen=5.0)}
    found = judge.judge(ranks)
    assert found.first.rank == 1 and found.culprits == (1,) and found.stopped == (0, 2)
    assert found.evidence.kind == "diverged" and found.evidence.seq == 19
    line = judge.line(found, "/tl/job/ev", stacks=False)
    assert line.startswith("FAILED: rank 1 failed first (killed by SIGABRT); the ranks diverged on group "
                           '"default" (ranks 0-2) at seq 19: ranks 0,2 all_reduce 172 B (float32, sum), '
                           "rank 1 all_reduce 8 B (float32, sum)"), line
    assert line.endswith("ranks 0,2 stopped by torchrun after that (SIGTERM/SIGKILL); culprit rank(s) 1; "
                         "details in /tl/job/ev/"), line
    assert "Root Cause" not in line   # torchrun named rank 1 too


def test_a_rank_that_left_short_is_first_and_torchruns_other_root_is_answered():
    err = "RuntimeError: [/w/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:914."
    ops = [(AR, 1024)] * 40
    ranks = {0: rank(0, 40, ops=ops, exit=pb.RankExit(exit_code=1, error=err, torchrun_root=True), seen=9.0),
             1: rank(1, 39, ops=ops[:39], exit=pb.RankExit(exit_code=0), seen=7.0),
             2: rank(2, 40, ops=ops, exit=pb.RankExit(exit_code=1, error=err), seen=9.0)}
    found = judge.judge(ranks)
    assert (found.first.rank, found.culprits, found.torchrun_root) == (1, (1,), 0)
    line = judge.line(found, "/tl/job/ev", stacks=True)
    assert line.startswith('FAILED: rank 1 left first (exit 0); rank 1 left after 39 ops on group "default" '
                           "(ranks 0-2) while ranks 0,2 were in their 40th (all_reduce 1 KiB (float32, sum)); "
                           "then ranks 0,2 exit 1; torchrun's Root Cause names rank 0 (exit 1 (RuntimeError: "
                           "Connection closed by peer [127.0.0.1]:914.)); the records blame rank 1: it left 39 ops "
                           'into group "default" (ranks 0-2) while the others waited for it'), line
    assert line.endswith("; culprit rank(s) 1; stacks in /tl/job/ev/"), line
    doc = judge.document(found, ranks, job_id="j", event_id="ev", world_size=3, declared_unix=1.0, verdict=line,
                         alive_at_failure=[0, 2])
    assert doc["evidence"]["peers"] == [0, 2] and doc["torchrun_root_cause"]["agrees"] is False
    assert [e["exit_code"] for e in doc["exits"]] == [1, 0, 1]


def test_the_left_early_rank_is_named_while_its_peers_still_wait_and_their_status_is_unknown():
    ops = [(AR, 1024)] * 40
    ranks = {0: rank(0, 40, alive=True), 1: rank(1, 39, ops=ops[:39], seen=7.0), 2: rank(2, 40, alive=True)}
    found = judge.judge(ranks)
    assert found.first.rank == 1 and found.first.how() == "exited (status not known)" and found.culprits == (1,)


def test_a_healthy_end_and_a_stopped_launcher_are_no_failure():
    ok = pb.RankExit(exit_code=0)
    assert judge.judge({r: rank(r, 40, exit=ok, seen=float(r)) for r in range(3)}) is None
    # a rank gone first, the others still finishing the last op it ran too: not early
    assert judge.judge({0: rank(0, 40, exit=ok), 1: rank(1, 40, alive=True), 2: rank(2, 39, alive=True)}) is None
    # Ctrl-C: the launcher was stopped, torchrun ended its workers at different seqs
    stop = pb.RankExit(stopped=True, signal=signal.SIGINT)
    assert judge.judge({0: rank(0, 12, exit=stop), 1: rank(1, 11, exit=stop), 2: rank(2, 12, exit=stop)}) is None


def test_an_oom_kill_and_a_lone_crash():
    oom = pb.RankExit(signal=signal.SIGKILL, oom_kill=True)
    found = judge.judge({0: rank(0, 5, alive=True), 1: rank(1, 5, exit=oom, seen=3.0)})
    assert found.first.rank == 1 and "OOM kill" in found.first.how()
    # killed by SIGKILL with no other failure: someone outside killed it, still the first failure
    found = judge.judge({0: rank(0, 5, exit=pb.RankExit(signal=signal.SIGKILL), seen=3.0)})
    assert found.first.rank == 0 and found.first.how() == "killed by SIGKILL"


def test_short_error_keeps_the_last_line_without_the_source_location():
    assert short_error("Traceback\n  x\nValueError: bad\n\n") == "ValueError: bad"
    assert short_error("RuntimeError: [/a/b/pair.cc:553] closed") == "RuntimeError: closed"
    assert len(short_error("E: " + "x" * 500)) == 120
    assert RankExit(3, exit_code=2, error="KeyError: 'x'").how() == "exit 2 (KeyError: 'x')"
