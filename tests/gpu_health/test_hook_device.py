"""A job that never calls set_device still has its GPU named (issue 34 item
6): two ranks' hooks (the real hook on the fake runtime, no tracer) launch on
device 0, their DEVICE records reach the agent's report, and the collector's
SLOW and HANG lines name the card and that the ranks share it."""

import os
import subprocess
import time

from diag.agent.agent import Agent
from diag.agent.config import AgentConfig
from diag.collector import gpus
from diag.collector.slowness import verdict_line
from diag.collector.state import JobState
from diag.records import format as fmt
from diag.slow.api import RULE_SLOW_GPU, CommWindow, RankWindow, SlowEvent, SlowFinding
from tests.gpu_health.test_gpu_job import gpu_phrase
from tests.gpu_health.test_gpu_units import HEALTHY
from tests.kernel_hook.conftest import HOOK, HOOKPROG, built  # noqa: F401 (the fixture)
from tests.kernel_hook.output import wait_for_line


def _ranks_on_device_0(shm):
    """Two hookprog ranks whose all-reduces launch on device 0 (no set_device)."""
    procs = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XPU_TIMER_", "FAKE_", "LD_PRELOAD"))}
        env.update(LD_PRELOAD=HOOK, XPU_TIMER_SHM_DIR=str(shm), RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE="2", CUDA_VISIBLE_DEVICES="0")
        procs.append(subprocess.Popen([HOOKPROG, "hang", "30"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))
    for proc in procs:
        line, seen = wait_for_line(proc, lambda ln: ln == "launched", time.time() + 20)
        assert line, seen
    return procs


def _report(shm):
    agent = Agent(AgentConfig(shm_dir=str(shm), collector="", token="t", job_id="hookdev", nvml_replay=HEALTHY,
                              gpu_sample_interval_s=60))
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            agent.sample_once()
            claims = agent.device_claims()
            # both devices claimed, and both hooks' launch counts in (their
            # COUNT records come on the hook's own cadence)
            if len(claims) == 2 and all(agent.state.perf.launches_total(r) for r in (0, 1)):
                break
            time.sleep(0.02)
        assert {r: rec.comm_rank for r, rec in agent.device_claims().items()} == {0: 0, 1: 0}
        agent.gpus.start()       # the replay; its first pass resolves and samples at once
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
                (h := agent.gpu_health(r)) is None or h.latest is None for r in (0, 1)):
            time.sleep(0.02)
        return agent.build_report()
    finally:
        agent.stopping.set()
        agent.gpus.join(5)


def _window(rank, tflops):
    comm = CommWindow(0, '"default"', "all_reduce", 600, 3.0, 0.005, 1e6, 64e6)
    return RankWindow(rank, 0, rank, "h", 60.0, tflops, 200, 2e12, (comm,), 100, 0.0, 1e4)


def test_hook_regions_name_a_shared_gpu_in_slow_and_hang_lines(built, tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    procs = _ranks_on_device_0(shm)
    try:
        report = _report(shm)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert not any(p.startswith(fmt.PRODUCER_PREFIX[fmt.PRODUCER_PYTHON]) for p in os.listdir(shm))  # hook only
    # each live rank's process counters ride along (issue 36's evidence), the hook's launches with them
    assert all(m.activity.procs == 1 for m in report.ranks), [m.activity for m in report.ranks]
    assert all(m.activity.launches_total for m in report.ranks), [m.activity for m in report.ranks]
    gpu = {m.rank: m.gpu.identity for m in report.ranks}
    assert {r: (g.pci_bus_id, g.index) for r, g in gpu.items()} == {0: ("0000:1b:00.0", 0),
                                                                                1: ("0000:1b:00.0", 0)}
    state = JobState()
    state.ingest(report, time.monotonic())
    snap = state.snapshot(time.monotonic())
    windows = {0: _window(0, 790.0), 1: _window(1, 330.0)}
    finding = SlowFinding(RULE_SLOW_GPU, (1,), 330.0, 790.0, "TFLOP/s", "GEMM 330 TFLOP/s vs job median 790 (-58%)")
    line = verdict_line(SlowEvent(finding, since=1.0, declared=2.0, windows=(windows,)), windows, 60, "/ev", snap)
    assert line.startswith(f"SLOW: rank 1 (node 0, {gpu_phrase(0)} shared with rank 0) GEMM 330 TFLOP/s"), line
    doc = {"culprits": [1], "verdict": "HANG: rank 1 never finished all_reduce; stacks in /ev/", "world_size": 2}
    gpus.annotate_hang(doc, snap, str(tmp_path))
    assert (f"; rank 1 on {gpu_phrase(0)} shared with rank 0, no XID or ECC error reported; stacks in /ev/"
            in doc["verdict"]), doc["verdict"]


def _said(tmp_path, producer, ordinals, state, pid):
    from diag.records.reader import RegionReader
    from diag.records.writer import RecordWriter
    w = RecordWriter(str(tmp_path), producer=producer, rank=0, local_rank=0, world_size=1, pid=pid)
    for d in ordinals:
        w.device(d, "", "", fmt.pack_pci(0, 0x1b + 0x10 * d, 0))
    rdr = RegionReader(w.path)
    state.add_region(w.path, rdr.header)
    state.apply(w.path, rdr.poll())
    rdr.close()
    w.close()


def test_the_device_launched_on_wins_over_the_one_set(tmp_path):
    from diag.agent.state import NodeState
    cases = [
        ((), (2,), 2),            # tracer only: set_device(2)
        ((0,), (), 0),            # hook only: launches on device 0, no set_device
        ((0, 2), (2,), 2),        # a stray launch on 0, then set_device(2) and the work there
        ((0,), (2,), 0),          # set_device(2) but every launch on cuda:0: the work's device
    ]
    for i, (hook, tracer, want) in enumerate(cases):
        state = NodeState(is_alive=lambda pid: True)
        here = tmp_path / str(i)
        here.mkdir()
        _said(here, fmt.PRODUCER_PYTHON, tracer, state, os.getpid())
        _said(here, fmt.PRODUCER_HOOK, hook, state, os.getpid())
        claim = state.ranks[0].device_claim()
        assert claim.comm_rank == want, (hook, tracer, claim)
        assert fmt.pci_text(claim.bytes) == f"0000:{0x1b + 0x10 * want:02x}:00.0"
