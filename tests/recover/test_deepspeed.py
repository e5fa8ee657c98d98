"""Issue 42: DeepSpeed ZeRO stages 1, 2 and 3 recovered through the real
xpu_timer_launch, bitwise.

One 2-rank gloo job (DS_ACCELERATOR=cpu, scripts/ds_job.py) trains three
engines side by side, ZeRO stage 1, 2 and 3, one Checkpointer holding each
rank's partition of all three (fp32 master weights, Adam's moments and step,
the engines' counters, the WarmupLR scheduler, the loss scaler, dropout's
RNG). Its final state (full parameters and moments, gathered, and the
counters and LR; a sha256 per stage) must equal an undisturbed run's after:
a planted hang under --hang-action recover, a kill -9 of one rank, and a
node lost whole (launcher and workers SIGKILLed while rank 1 stalls unseen;
a new launcher, its store empty, restores from the copies the agent persisted).
The hang and the kill are one job's two faults (the hang in its first
attempt, the kill in the attempt restored from it), each judged on its own:
a job less of two DeepSpeed ranks (about 15 CPU-s). The three jobs run side
by side (one module fixture); the node-loss restart after them.
"""

from __future__ import annotations

import os
import re

import pytest

from tests.functional.launch import ROOT, module_launches  # noqa: F401 (fixture)
from tests.recover.test_recover_e2e import common_step, kill_node
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(420)
SCRIPT = os.path.join(ROOT, "tests", "recover", "scripts", "ds_job.py")
STEPS, AT = 12, 8
KILL_AT = 10    # the kill, in the attempt the hang's recovery started
ENV = {"XPU_TIMER_DUMP_TOOLS": "py-spy", "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}


# --hang-timeout 10 s, not 3: between two of DeepSpeed's start-up broadcasts a
# rank computes alone for seconds, and beside make test's other tests that
# outlasted 3 s (a true stall at that timeout, and a restart nobody planted).
def args(tmp, job_id, fault, hang_timeout="10s", extra=(), at=str(AT), restarts=1):
    return ["--nproc-per-node", "2", "--hang-timeout", hang_timeout, "--hang-action", "recover",
            "--max-restarts", str(restarts), "--ckpt-persist-every", "1", "--timeline-path", str(tmp / "tl"),
            "--rdzv-id", job_id, *extra, SCRIPT, str(STEPS), fault, at, "0.05"]


def finals(job) -> dict[int, tuple[int, dict]]:
    """rank -> (restart count, {stage: sha256})."""
    out = {}
    for line in job.matching(r"^FINAL rank="):
        fields = dict(kv.split("=") for kv in line.split()[1:])
        out[int(fields.pop("rank"))] = (int(fields.pop("restart")), fields)
    return out


def restored(job, restart: int) -> dict[int, int]:
    return {int(m.group(1)): int(m.group(2)) for m in
            (re.search(r"rank=(\d+) restart=\d+ step=(\d+)", line)
             for line in job.matching(rf"^RESTORED rank=\d+ restart={restart} "))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, module_launches):  # noqa: F811
    tmp = tmp_path_factory.mktemp("ds")
    pid = os.getpid()
    disk = tmp / "shared-ckpt"
    jobs = {"reference": module_launches(args(tmp, f"dsref-{pid}", "none"), env=ENV),
            # attempt 0 hangs at AT; attempt 1, restored from it, loses rank 1 to kill -9 at KILL_AT
            "faults": module_launches(args(tmp, f"dsfaults-{pid}", "hang,kill", at=f"{AT},{KILL_AT}", restarts=2),
                                      env=ENV),
            # rank 1 stops at AT, unseen (a long --hang-timeout) until the node dies whole below
            "lost": module_launches(args(tmp, f"dslost-{pid}", "hang", hang_timeout="600s",
                                         extra=["--blocked-after", "600s", "--ckpt-dir", str(disk)]), env=ENV)}
    assert jobs["lost"].wait_line(r"^FAULT hang", 300), jobs["lost"].output()
    wait_for(lambda: common_step(disk, range(2)) >= AT, timeout=120, what="step AT persisted by both ranks")
    kill_node(jobs["lost"])
    codes = {name: job.wait(360) for name, job in jobs.items()}
    jobs["disk"] = module_launches(args(tmp, f"dsdisk-{pid}", "none", extra=["--ckpt-dir", str(disk)]), env=ENV)
    codes["disk"] = jobs["disk"].wait(240)
    return jobs, codes


def want(runs) -> dict:
    jobs, codes = runs
    ref = jobs["reference"]
    assert codes["reference"] == 0, ref.output()
    shas = finals(ref)
    assert sorted(shas) == [0, 1] and shas[0] == shas[1], ref.output()
    assert sorted(shas[0][1]) == ["zero1", "zero2", "zero3"]
    return shas[0][1]


def test_undisturbed_run_snapshots_every_step_without_an_alarm(runs):
    jobs, _ = runs
    want(runs)
    assert not jobs["reference"].matching(r"HANG|RECOVERED|snapshots are off|Traceback"), jobs["reference"].output()


def test_a_planted_hang_recovers_from_memory_bitwise(runs):
    jobs, codes = runs
    job, ref = jobs["faults"], want(runs)
    assert codes["faults"] == 0, job.output()
    assert len(job.matching(r"^HANG: ")) == 1, job.output()
    assert job.matching(rf"^FAULT hang rank=1 step={AT} "), job.output()
    again = restored(job, 1)
    assert len(set(again.values())) == 1 and AT - 1 <= again[0] <= AT, job.output()
    assert job.matching(rf"restored step {again[0]} from memory"), job.output()
    assert job.matching(rf"^LAST WORDS: event \S+: 1 node\(s\) on disk at step {AT}$"), job.output()
    # The kill's restore reads a step this attempt computed on from the hang's (attempt 0 kept
    # none past AT): the job ending bitwise equal judges this restore too.
    assert all(step > AT for step in restored(job, 2).values()), job.output()
    assert finals(job) == {0: (2, ref), 1: (2, ref)}, job.output()


def test_a_rank_killed_by_sigkill_recovers_from_memory_bitwise(runs):
    jobs, codes = runs
    job, ref = jobs["faults"], want(runs)
    assert codes["faults"] == 0, job.output()
    assert job.matching(rf"^FAULT kill rank=1 step={KILL_AT} "), job.output()
    assert len(job.matching(r"^HANG: ")) == 1, job.output()     # the kill is a crash, not a second hang
    assert finals(job) == {0: (2, ref), 1: (2, ref)}, job.output()
    again = restored(job, 2)
    assert len(set(again.values())) == 1 and KILL_AT - 1 <= again[0] <= KILL_AT, job.output()
    assert job.matching(rf"restored step {again[0]} from memory"), job.output()


def test_a_node_lost_whole_restores_from_the_persisted_copy_bitwise(runs):
    jobs, codes = runs
    lost, job, ref = jobs["lost"], jobs["disk"], want(runs)
    assert codes["lost"] == -9 and not finals(lost), lost.output()
    assert codes["disk"] == 0, job.output()
    assert finals(job) == {0: (0, ref), 1: (0, ref)}, job.output()
    again = restored(job, 0)
    assert len(set(again.values())) == 1 and AT - 1 <= again[0] <= AT, lost.output() + job.output()
    assert job.matching(rf"rank 0: restored step {again[0]} from disk"), job.output()
