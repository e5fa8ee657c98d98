"""Lightning's DDP job must exit 0 under the launcher, every time (issue 18).

Lightning destroys its process group at exit only on NCCL: on gloo the group
is torn down by the interpreter's exit. A gloo worker thread that drops the
last reference to a finished work after the main thread began finalising
needs the GIL to free the work's tensors (their Python objects), is ended by
the interpreter instead, and the unwind through gloo's noexcept destructor
aborts the worker: ``terminate called without an active exception``, launcher
exit 1. The fix: the tracer destroys a gloo group left up at exit, while the
interpreter is whole. That it does so is checked every time the suite runs, on a torch-only
job (scripts/gloo_left_up.py). The race itself (before the fix about one run in
15) is checked by the job as its user wrote it (no comm hook, no timing:
``--untimed``), once (20 times, three side by side, under ``make soak``):
these are the suite's only Lightning jobs that leave their group to the exit
(the timed ones destroy it, the stalled ones are killed). At one loss in 15,
`make test`'s run sees the race by chance at best (was 2 runs, one time in
eight, for 12 more CPU-s of a suite bound by CPU); what guards the fix on
every run is the exit handler's check, and `make soak` is what measures the
race. Not marked alone: the race is lost more
often on a loaded machine, so running beside other tests makes the check
stricter."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from diag.common.net import free_port
from tests.frameworks import jobs
from tests.functional.launch import Launch
from tests.soak import runs

# Each run is ~12 CPU-s (a launcher and two ranks importing torch and
# Lightning): the suite's costliest repeat. A few at a time: the launcher's
# start-up is mostly one core's work.
RUNS, AT_ONCE = runs(1, 20), 3
pytestmark = pytest.mark.timeout(900)


def _run(tmp_path, run: int):
    """One run, start to exit: None if it exited 0 without the abort, else (run, code, its output's tail)."""
    job = Launch(["--nproc-per-node", str(jobs.WORLD), "--master-port", str(free_port()),
                  "--timeline-path", str(tmp_path / "timeline"), jobs.script("lightning_ddp"),
                  str(tmp_path / str(run)), "--steps", "2", "--untimed"], env=jobs.QUIET)
    try:
        code = job.wait(180)
    finally:
        job.kill()
    if code != 0 or job.matching(r"terminate called"):
        return run, code, job.output()[-3000:]
    return None


def test_lightning_ddp_exits_zero_every_time_under_the_launcher(tmp_path):
    # A rolling pool (was: batches of two, each waiting for its slower run):
    # a run starts as soon as one ends, so the cores never wait on a straggler.
    with ThreadPoolExecutor(AT_ONCE) as pool:
        failed = [f for f in pool.map(lambda run: _run(tmp_path, run), range(RUNS)) if f is not None]
    assert not failed, f"{len(failed)} of {RUNS} runs failed; first: {failed[0]}"


@pytest.mark.parametrize("last_op", ["all_reduce", "ddp_backward"])
def test_a_gloo_group_left_up_is_destroyed_at_exit_while_the_interpreter_is_whole(tmp_path, last_op):
    # The fix the runs above check by chance, checked every time: under the
    # launcher, the tracer's exit handler destroys the group the job left up
    # (under plain torch nothing does, and the script prints nothing).
    # One job at a time: the two side by side (tried, to save their wall)
    # aborted the DDP one after its group was destroyed ("terminate called",
    # 2 of 16 rounds; apart 0 of 16, 8 of them beside two busy loops): a race
    # this check is not about.
    job = Launch(["--nproc-per-node", str(jobs.WORLD), "--master-port", str(free_port()),
                  "--timeline-path", str(tmp_path / "timeline"), jobs.script("gloo_left_up"),
                  *(["--ddp"] if last_op == "ddp_backward" else [])], env=jobs.QUIET)
    try:
        code = job.wait(120)
    finally:
        job.kill()
    assert code == 0, job.output()[-3000:]
    assert sorted(job.matching(r"^DESTROYED ")) == [f"DESTROYED AT EXIT {rank}" for rank in range(jobs.WORLD)], \
        job.output()[-3000:]
