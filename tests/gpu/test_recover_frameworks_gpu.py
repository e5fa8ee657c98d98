"""Issue 42 on one GPU: DeepSpeed ZeRO 1, 2, 3 (tests/recover/scripts/ds_job.py --cuda) and
Megatron-Core's DistributedOptimizer at TP=PP=DP=1 (scripts/mcore_job.py), each killed by
SIGKILL under xpu_timer_launch --hang-action recover and resumed from memory bitwise equal to an
undisturbed run; then the paired step cost of save() for DeepSpeed (a snapshot every other step,
the steps with and without one compared, median of pairs). `bash tests/gpu/session.sh x1fwrecover`."""

from __future__ import annotations

import json
import os
import re
import statistics

import pytest
import torch

from bench.launch_job import ROOT, Launch

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"), pytest.mark.timeout(900)]
SCRIPTS = os.path.join(ROOT, "tests", "recover", "scripts")
ENV = {"XPU_TIMER_DUMP_TOOLS": "py-spy"}


def launch(tmp, job_id, script, *argv):
    job = Launch(["--nproc-per-node", "1", "--hang-timeout", "20s", "--hang-action", "recover", "--max-restarts", "1",
                  "--ckpt-persist-every", "10", "--timeline-path", str(tmp / "tl"), "--rdzv-id", job_id,
                  os.path.join(SCRIPTS, script), *argv], env=ENV)
    try:
        code = job.wait(420)
    finally:
        job.kill()
    return job, code


def final(job) -> tuple[int, dict]:
    [line] = job.matching(r"^FINAL rank=0 ")
    fields = dict(kv.split("=") for kv in line.split()[1:])
    fields.pop("rank")
    return int(fields.pop("restart")), fields


def restored(job) -> int:
    [line] = job.matching(r"^RESTORED rank=0 restart=1 ")
    return int(re.search(r" step=(\d+)", line).group(1))


@pytest.mark.parametrize("script,argv", [("ds_job.py", ["--cuda"]), ("mcore_job.py", [])], ids=["deepspeed", "megatron"])
def test_killed_and_resumed_from_memory_bitwise(tmp_path, script, argv):
    steps, at = 30, 20
    ref, code = launch(tmp_path, f"ref-{os.getpid()}", script, str(steps), "none", str(at), *(["0"] if argv else []), *argv)
    assert code == 0, ref.output()
    killed, code = launch(tmp_path, f"kill-{os.getpid()}", script, str(steps), "kill", str(at), *(["0"] if argv else []), *argv)
    assert code == 0, killed.output()
    want, got = final(ref)[1], final(killed)
    print(f"{script}: reference {want}; resumed at step {restored(killed)}: {got}; "
          f"{killed.matching(r'restored step')}")
    assert got == (1, want), killed.output()
    assert at - 1 <= restored(killed) <= at and killed.matching(r"restored step \d+ from memory"), killed.output()


def test_deepspeed_paired_step_cost_of_save(tmp_path):
    job, code = launch(tmp_path, f"cost-{os.getpid()}", "ds_job.py", "400", "none", "0", "0", "--cuda", "--time")
    assert code == 0, job.output()
    [line] = job.matching(r"^COST ")
    cost = json.loads(line.split(" ", 1)[1])
    on, off = cost["step_with_save_s"][20:], cost["step_without_s"][20:]       # warm-up left out
    pairs = [(a - b) / b * 100 for a, b in zip(on, off)]
    print(f"DeepSpeed ZeRO 1+2+3 step, world size 1: without save {statistics.median(off) * 1e3:.2f} ms, with "
          f"{statistics.median(on) * 1e3:.2f} ms; paired {statistics.median(pairs):+.2f} % (median of {len(pairs)}); "
          f"save() {cost['save_call_s'] / max(1, cost['saved']) * 1e3:.2f} ms a call; committed "
          f"{cost['committed']}/{cost['saved']} ({cost['skipped_slot']} skipped: the agent was persisting that slot, "
          f"--ckpt-persist-every 10); pre-hook waits over 1 ms: {cost['prehook_waits']}")
    # a snapshot is either committed or left for the next because the agent was writing its slot to disk
    assert cost["committed"] + cost["skipped_slot"] == cost["saved"] and cost["skipped_busy"] == 0, cost
