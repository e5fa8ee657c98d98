"""What bench/verdict_race.py and bench/deadlock_race.py read from other
tools' output: torchrun's "Root Cause" block and fr_trace's findings, on
samples torch 2.13 printed (3 gloo ranks, tests/scripts/*.py)."""

from bench.verdict_race import fr_unjoined, root_cause

# torchrun's summary after tests/scripts/crash_skip.py two 10 40 (gloo aborted rank 1)
SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
bench/gloo_user_worker.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-29_06:52:04
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 1277)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 1277
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_06:52:04
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 1278)  (SIGABRT)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 1278
============================================================"""


def _from_root(text: str) -> list[str]:
    lines = text.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("Root Cause")):]


def test_the_root_cause_is_the_blocks_global_rank_and_exit_not_a_listed_failure():
    assert root_cause(_from_root(SUMMARY)) == (1, "exitcode -6 (SIGABRT)")
    # a second node: the global rank, not the local one; an exit code without a signal
    other = SUMMARY.replace("rank      : 1 (local_rank: 1)", "rank      : 4 (local_rank: 1)") \
                   .replace("exitcode  : -6 (pid: 1278)  (SIGABRT)", "exitcode  : 1 (pid: 482) ")
    assert root_cause(_from_root(other)) == (4, "exitcode 1")


def test_a_block_cut_before_its_rank_line_names_no_one():
    assert root_cause(_from_root(SUMMARY)[:4]) is None
    assert root_cause(["Root Cause (first observed failure):", "=" * 20, "  rank      : 3 (local_rank: 3)"]) is None


# fr_trace on the dumps of tests/scripts/deadlock.py --mode skip-default --at 10 (stack frames cut)
FR_TRACE = """\
tabulate is not installed. Proceeding without it.
Not all ranks joining collective, sequence number: 10
internal record id: 18
group info: 0:default_pg
collective: gloo:all_reduce
missing ranks: {1}
input sizes: [[256]]
collective stack trace: 
 all_reduce at /x/distributed_c10d.py:3245
Not all ranks joining collective, sequence number: 10
internal record id: 18
group info: 1:stats
collective: gloo:all_reduce
missing ranks: {0, 2}
input sizes: [[1]]
"""


def test_fr_traces_unjoined_collectives_in_one_line():
    assert fr_unjoined(FR_TRACE) == ("group 0:default_pg seq 10 gloo:all_reduce missing ranks {1}; "
                                     "group 1:stats seq 10 gloo:all_reduce missing ranks {0, 2}")
    assert fr_unjoined("KeyError: ('0', 0)\n") == ""
