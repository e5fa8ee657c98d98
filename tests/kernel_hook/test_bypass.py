"""xpu_timer_hook_bypass(), the hook's one exported control: while it is on,
launches, GEMMs and collectives go to the library untouched but are neither
counted nor timed (bench/hook_step_overhead.py uses it to measure the hook's own
cost inside one process). Communicator and group calls are still seen, so a
communicator split while bypassed is known afterwards."""

import collections

from diag.records import format as fmt
from tests.kernel_hook.conftest import read_regions, run_prog


def test_bypassed_calls_are_forwarded_but_leave_no_record(built, tmp_path):
    # Probes off: a probe's own event, recorded when a probe period passes
    # between two launches (on a loaded machine it does), is not the app's.
    out = run_prog("bypass", shm_dir=str(tmp_path), env={"XPU_TIMER_HOOK_TIME_EVERY": "1",
                                                         "XPU_TIMER_HOOK_PROBE_MS": "0"})
    assert out.returncode == 0 and out.stderr == "", out.stdout + out.stderr
    # Off before, on during; the bypassed all-reduce still reached the library.
    assert "bypass before 0 during 1 forwarded 1" in out.stdout, out.stdout
    # xpu_timer_hook_recording(): what the tracer asks before leaving a
    # device collective to the hook. Off until the first hooked call starts
    # the core (asking starts nothing), off while bypassed.
    assert "recording unstarted 0 started 1 bypassed 0 again 1" in out.stdout, out.stdout
    [region] = read_regions(str(tmp_path))
    # 2 rounds recorded before, 1 after; the 5 bypassed ones are not there.
    # A round's kernels: its own launch, the GEMM's and the all-reduce's (the
    # fake cuBLAS and NCCL launch through the driver, as the real ones do).
    launches = collections.Counter()
    for r in region.of(fmt.EVENT_COUNT):
        launches[r.name] += r.count
    assert launches == {"xt_test_empty_kernel": 3, "fake_cublasGemmEx_kernel": 3,
                        "fake_ncclAllReduce_kernel": 3, "fake_ncclAllGather_kernel": 1}
    assert len(region.of(fmt.EVENT_START, "cublasGemmEx")) == 3
    reduces = region.of(fmt.EVENT_START, "ncclAllReduce")
    assert [r.seq for r in reduces] == [1, 2, 3]  # seqs count recorded ops only
    assert [r.bytes for r in reduces] == [400, 404, 400]
    # The child made while bypassed is registered: its all-gather after the
    # bypass carries the split's id (not the world's) and all ops ended.
    [gather] = region.of(fmt.EVENT_START, "ncclAllGather")
    assert gather.comm_id not in (0, reduces[0].comm_id) and gather.seq == 1
    assert len(region.of(fmt.EVENT_END)) == len(region.of(fmt.EVENT_START)) == 7
    # Every timed op is device-timed with a start and end event: 2 per op.
    app_events = int(out.stdout.split("app events ")[1].split()[0])
    assert app_events == 2 * 7


def test_without_the_hook_there_is_no_control(built, tmp_path):
    out = run_prog("bypass", shm_dir=str(tmp_path), preload=False)
    assert out.returncode == 3 and "no xpu_timer_hook_bypass" in out.stdout
