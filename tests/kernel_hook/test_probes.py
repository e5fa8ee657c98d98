"""Kernel completion probes (kernel_hook/probes.cc, docs/kernel_hook.md "Kernels
that never end"), on the fake runtime: a kernel that never ends is reported in
a PROBE record with its name, its earlier runs and the launches since; a long
kernel that ends is reported while it runs and cleared once it ended."""

from diag.records import format as fmt
from tests.kernel_hook.conftest import read_regions, run_prog

KERNEL = "xt_test_empty_kernel"


def _probes(tmp_path, *args, env):
    proc = run_prog("probe", *args, shm_dir=str(tmp_path), env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    [region] = read_regions(str(tmp_path))
    return region, region.of(fmt.EVENT_PROBE)


def test_a_kernel_that_never_ends_is_reported_with_its_history(built, tmp_path):
    # 5 runs 20 ms apart (a probe period is 5 ms: each after the first is
    # probed), then a 6th that never ends, then 3 s without a launch.
    region, probes = _probes(tmp_path, "5", "20", "3000", env={"FAKE_HANG": "cudaLaunchKernel:6"})
    assert len(probes) >= 3, probes          # from 1 s old on, every 500 ms
    last = probes[-1]
    assert (last.name, last.kind, last.count) == (KERNEL, fmt.KIND_KERNEL, 0)   # nothing launched since
    assert last.op_id != 0 and {p.op_id for p in probes} == {last.op_id}        # one probe, said again
    assert last.seq >= 3                      # its earlier probed runs ended ...
    assert 0 < last.duration_ns < 500_000_000  # ... launch to end within a few ms
    # The last launch the drainer saw: the stuck one. ``bytes`` is the time of
    # the drainer pass that saw the launches' count move, read before it reads
    # the counts, so a launch whose thread was preempted between counting and
    # stamping itself (a loaded host: 2.7 us once) can carry a later time.
    assert abs(last.bytes - last.t_mono_ns) < 100_000_000
    # said from 1 s on: the record's time is the launch's, 3 s before the end
    assert all(p.t_mono_ns == last.t_mono_ns for p in probes)


def test_a_long_kernel_that_ends_is_reported_then_cleared(built, tmp_path):
    # the last launch (through the _ptsz entry point, its own delay control)
    # runs 1.6 s, then ends: said while it runs, cleared (op_id 0) after.
    region, probes = _probes(tmp_path, "5", "20", "3000", "cudaLaunchKernel_ptsz",
                             env={"FAKE_DELAY_US": "cudaLaunchKernel_ptsz=1600000"})
    said = [p for p in probes if p.op_id]
    assert said and all(p.name == KERNEL for p in said), probes
    assert probes[-1].op_id == 0 and probes[-1].name == ""
    assert len([p for p in probes if not p.op_id]) == 1


def test_probes_switched_off_say_nothing(built, tmp_path):
    region, probes = _probes(tmp_path, "3", "20", "1500",
                             env={"FAKE_HANG": "cudaLaunchKernel:4", "XPU_TIMER_HOOK_PROBE_MS": "0"})
    assert probes == [] and region.of(fmt.EVENT_COUNT, KERNEL)


def test_a_healthy_loop_of_short_kernels_says_nothing(built, tmp_path):
    region, probes = _probes(tmp_path, "40", "10", "1200", env={})
    assert probes == [] and sum(r.count for r in region.of(fmt.EVENT_COUNT, KERNEL)) == 41


def test_a_negative_period_is_one_line(built, tmp_path):
    proc = run_prog("probe", "1", "1", "10", shm_dir=str(tmp_path), env={"XPU_TIMER_HOOK_PROBE_MS": "-1"})
    assert proc.returncode == 0
    assert proc.stderr.count("XPU_TIMER_HOOK_PROBE_MS=-1 is negative; using 5") == 1, proc.stderr
