"""Sampled device timing (the default, XPU_TIMER_HOOK_TIME_EVERY=8): every
GEMM and collective is recorded with its FLOPs/bytes, a sample of them carries
the device duration (flag bit 0), every unsampled collective still ends only
once the (fake) device has run it, and a collective that never completes is
never ended, sampled or not."""

import pytest

from diag.records import format as fmt
from tests.kernel_hook.conftest import read_regions, run_prog

N = 64
DELAYS_US = {"cublasGemmEx": 2000, "ncclAllReduce": 3000}
SLACK_NS = 60_000_000


def _run(tmp_path, **env):
    delays = ",".join(f"{k}={v}" for k, v in DELAYS_US.items())
    out = run_prog("sampled", str(N), shm_dir=str(tmp_path),
                   env={"FAKE_DELAY_US": delays, **env})
    assert out.returncode == 0, out.stderr
    [region] = read_regions(str(tmp_path))
    return region, out.stderr


@pytest.fixture(scope="module")
def default_region(built, tmp_path_factory):
    region, err = _run(tmp_path_factory.mktemp("shm"))
    assert err == ""
    return region


@pytest.mark.parametrize("name", sorted(DELAYS_US))
def test_every_call_is_recorded_and_a_sample_is_device_timed(default_region, name):
    ends = default_region.of(fmt.EVENT_END, name)
    assert len(ends) == N and default_region.dropped == 0
    timed = [r for r in ends if r.flags & fmt.FLAG_DEVICE_TIMED]
    # 1 in 8 on average; the choice is deterministic (seeded per thread, or a
    # hash of comm id and seq), so these bounds are not flaky.
    assert 2 <= len(timed) <= N // 3, len(timed)
    for r in timed:
        assert DELAYS_US[name] * 1000 <= r.duration_ns < DELAYS_US[name] * 1000 + SLACK_NS
    for r in ends:
        if not r.flags & fmt.FLAG_DEVICE_TIMED:
            assert r.duration_ns == 0 and not r.flags & fmt.FLAG_FAILED
    if name == "cublasGemmEx":
        assert {r.flops for r in ends} == {2 * 64 * 32 * 16}
    else:
        assert {r.bytes for r in ends} == {1024} and [r.seq for r in ends] == list(range(1, N + 1))


def test_unsampled_collectives_end_after_the_device_ran_them(default_region):
    # The fake stream runs gemm, all-reduce, gemm, ... in order: the i-th
    # all-reduce cannot finish before (i+1) gemms and i+1 all-reduces of delay
    # since the first launch. Its END (one end event) is written only then.
    starts = {r.op_id: r.t_mono_ns for r in default_region.of(fmt.EVENT_START)}
    ars = default_region.of(fmt.EVENT_END, "ncclAllReduce")
    first = min(starts.values())
    per_round_ns = sum(DELAYS_US.values()) * 1000
    for i, r in enumerate(ars):
        assert r.t_mono_ns - first >= (i + 1) * per_round_ns, (i, r)


def test_time_every_1_times_every_call(built, tmp_path):
    region, err = _run(tmp_path, XPU_TIMER_HOOK_TIME_EVERY="1")
    assert err == ""
    ends = region.of(fmt.EVENT_END)
    assert len(ends) == 2 * N and all(r.flags & fmt.FLAG_DEVICE_TIMED for r in ends)


@pytest.mark.parametrize("value, why", [("zero", "not a whole number"),
                                        ("0", "not a positive number"),
                                        ("-3", "not a positive number")])
def test_bad_time_every_says_so_once_and_uses_the_default(built, tmp_path, value, why):
    region, err = _run(tmp_path, XPU_TIMER_HOOK_TIME_EVERY=value)
    assert err.count("\n") == 1
    assert err.endswith(f"): XPU_TIMER_HOOK_TIME_EVERY={value} is {why}; using 8\n"), err
    timed = [r for r in region.of(fmt.EVENT_END) if r.flags & fmt.FLAG_DEVICE_TIMED]
    assert len(region.of(fmt.EVENT_END)) == 2 * N and 0 < len(timed) < N


def test_an_unsampled_hung_collective_never_ends(built, tmp_path):
    # A huge N: no collective is sampled, each has only its completion (a
    # drainer fence). The 2nd never completes: it and the one queued behind it
    # stay in flight. 20 ms apart, each gets a fence of its own (back to back,
    # all three may share one, and the 1st then waits on the hung one too).
    out = run_prog("hang", "1", shm_dir=str(tmp_path),
                   env={"FAKE_HANG": "ncclAllReduce:2", "XPU_TIMER_HOOK_TIME_EVERY": "1000000",
                        "HANG_GAP_MS": "20"})
    assert out.returncode == 0, out.stderr
    [region] = read_regions(str(tmp_path))
    assert [r.seq for r in region.of(fmt.EVENT_START, "ncclAllReduce")] == [1, 2, 3]
    [end] = region.of(fmt.EVENT_END, "ncclAllReduce")
    assert end.seq == 1 and not end.flags & fmt.FLAG_DEVICE_TIMED
