"""H200 x2, real NCCL under xpu_timer_launch:
    python3 -m pytest -q -s tests/gpu/test_hook_nccl_2gpu.py
- collective durations (of the sampled ops: the same ones on both ranks), bytes
  and sequence numbers line up across the 2 ranks;
- a real hang (rank 1 skips an all-reduce) is flagged for rank 0's NCCL kernel
  within the hang timeout + 2 s, and both ranks' stacks are dumped (needs
  py-spy on PATH: on the GPU machines, the carried wheel's /tmp/site/bin)."""

import glob
import json
import os
import statistics
import subprocess
import sys
import time

import pytest

from tests.gpu.conftest import ROOT, SCRIPTS, launch
from tests.kernel_hook.output import stop_session, wait_for_line

pytestmark = pytest.mark.gpus(2)
HANG_TIMEOUT_S = 10


def test_collectives_line_up_across_ranks(hook_built, tmp_path):
    out = launch(["--nproc-per-node", "2", "--hang-timeout", "300s", "--timeline-path",
                  str(tmp_path / "timeline"), os.path.join(SCRIPTS, "hook_nccl_ranks.py"),
                  str(tmp_path)], timeout=600,
                 env={"XPU_TIMER_HOOK_TIME_EVERY": "4"})  # ~1 in 4 device-timed
    assert out.returncode == 0, out.stderr[-3000:]
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    keys = [[(e["name"], e["comm_id"], e["seq"]) for e in rk["ends"]] for rk in ranks]
    print(json.dumps({"rank0": keys[0][:40]}, indent=None))
    assert keys[0] == keys[1]  # same ops, same communicator ids, same seqs, same order
    for rk, rank in zip(ranks, range(2)):
        ars = [e for e in rk["ends"] if e["name"] == "ncclAllReduce" and e["bytes"] == 16 << 20]
        ags = [e for e in rk["ends"] if e["name"] == "ncclAllGather"]
        assert len(ars) == 20 and len(ags) == 10
        assert {e["bytes"] for e in ags} == {32 << 20}  # nccl-tests: the whole output
        assert {(e["comm_rank"], e["comm_size"]) for e in ars + ags} == {(rank, 2)}
        timed = [e for e in ars + ags if e["flags"] & 1]
        assert timed and all(e["dur_ns"] > 0 for e in timed)
        assert all(e["dur_ns"] == 0 and not e["flags"] & 4 for e in ars + ags if not e["flags"] & 1)
        seqs = [e["seq"] for e in rk["ends"] if e["comm_id"] == ars[0]["comm_id"]]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gaps
    # Sampling hashes (comm id, seq): both ranks device-timed the same ops.
    sampled = [[(e["comm_id"], e["seq"]) for e in rk["ends"] if e["flags"] & 1] for rk in ranks]
    assert sampled[0] == sampled[1]
    for name in ("ncclAllReduce", "ncclAllGather"):
        durs = [[e["dur_ns"] for e in rk["ends"] if e["name"] == name and e["flags"] & 1]
                for rk in ranks]
        if not durs[0]:
            continue  # none of this kind sampled in this run
        med = [statistics.median(d) for d in durs]
        print(f"{name}: median device time rank0 {med[0] / 1e3:.1f} us, rank1 {med[1] / 1e3:.1f} us")
        assert max(med) < 3 * min(med)  # one collective: both ranks see about the same time


def test_real_nccl_hang_is_flagged_and_stacks_dumped(hook_built, tmp_path):
    tl = tmp_path / "timeline"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               XPU_TIMER_TRACER_DISABLE="1")  # only the hook can see rank 0 in the collective
    proc = subprocess.Popen(
        [sys.executable, "-m", "diag.launcher.main", "--nproc-per-node", "2", "--hang-timeout",
         f"{HANG_TIMEOUT_S}s", "--timeline-path", str(tl),
         os.path.join(SCRIPTS, "hook_nccl_hang.py")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        skip, _ = wait_for_line(proc, lambda l: "SKIP " in l, time.time() + 300, echo=True)
        assert skip, "rank 1 never reached the skipped all-reduce"
        t_skip = float(skip.split("SKIP ")[1].split()[0])
        hang, _ = wait_for_line(proc, lambda l: "HANG: " in l, t_skip + HANG_TIMEOUT_S + 30,
                                echo=True)
        t_hang = time.time()
        assert hang, "no HANG verdict"
        print(f"flagged {t_hang - t_skip:.1f} s after the skip (timeout {HANG_TIMEOUT_S} s)")
        assert t_hang - t_skip <= HANG_TIMEOUT_S + 2
        assert "0" in hang.split("HANG: ")[1].split(" in ")[0]
        deadline, report = time.time() + 60, None
        while time.time() < deadline and report is None:
            for path in glob.glob(str(tl / "*" / "*" / "hang.json")):
                data = json.load(open(path))
                dumps = data.get("dumps", {})
                # A real stack for each rank, not only an error.txt saying why not.
                if all(any(not f.endswith(".error.txt") for f in dumps.get(r, []))
                       for r in ("0", "1")):
                    report = data
            time.sleep(0.5)
        assert report, "stacks of both ranks were not dumped"
        print(json.dumps(report, indent=1)[:3000])
        assert 0 in report["hung_ranks"]
        rank0 = next(r for r in report["ranks"] if r["rank"] == 0)
        assert rank0["op"] == "ncclAllReduce" and rank0["kind"] == "collective"
    finally:
        stop_session(proc)
