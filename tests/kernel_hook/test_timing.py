"""Durations, FLOPs, bytes and counts recorded through LD_PRELOAD against the
fake device, whose kernels take the delays set in FAKE_DELAY_US. Every op is
device-timed here (XPU_TIMER_HOOK_TIME_EVERY=1); test_sampling.py covers the
default, sampled timing."""

import collections

import pytest

from diag.records import format as fmt
from tests.kernel_hook.conftest import read_regions, run_prog

DELAYS_US = {"cublasGemmEx": 20000, "ncclAllReduce": 30000, "cublasLtMatmul": 5000}
# A sleeping fake kernel can only take longer than asked; generous on a busy CI box.
SLACK_NS = 60_000_000


@pytest.fixture(scope="module")
def timed_region(built, tmp_path_factory):
    shm = tmp_path_factory.mktemp("shm")
    out = run_prog("timed", shm_dir=str(shm), env={
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "XPU_TIMER_HOOK_TIME_EVERY": "1",
        "FAKE_DELAY_US": ",".join(f"{k}={v}" for k, v in DELAYS_US.items())})
    assert out.returncode == 0 and out.stderr == "", out.stderr
    [region] = read_regions(str(shm))
    return region


def test_header_identifies_the_rank(timed_region):
    h = timed_region.header
    assert (h.rank, h.local_rank, h.world_size, h.producer) == (1, 1, 4, fmt.PRODUCER_HOOK)
    assert timed_region.dropped == 0 and not timed_region.disabled


@pytest.mark.parametrize("name", sorted(DELAYS_US))
def test_durations_match_the_simulated_delays(timed_region, name):
    ends = timed_region.of(fmt.EVENT_END, name)
    assert ends
    for r in ends:
        assert r.flags & fmt.FLAG_DEVICE_TIMED
        assert DELAYS_US[name] * 1000 <= r.duration_ns < DELAYS_US[name] * 1000 + SLACK_NS


def test_every_op_starts_before_it_ends(timed_region):
    starts = {r.op_id: r for r in timed_region.of(fmt.EVENT_START)}
    ends = {r.op_id: r for r in timed_region.of(fmt.EVENT_END)}
    assert set(starts) == set(ends) and len(ends) == 3 + 2 + 2 + 1
    for op_id, end in ends.items():
        assert starts[op_id].t_mono_ns <= end.t_mono_ns
        assert starts[op_id].name == end.name


def test_gemm_flops(timed_region):
    assert {r.flops for r in timed_region.of(fmt.EVENT_END, "cublasGemmEx")} == {2 * 128 * 64 * 32}
    # Lt: D is 16 x 8, A is 16 x 256 (so k = 256), batch 4.
    assert {r.flops for r in timed_region.of(fmt.EVENT_END, "cublasLtMatmul")} == \
        {2 * 16 * 8 * 256 * 4}


def test_collectives_bytes_dtype_comm_and_seq(timed_region):
    colls = [r for r in timed_region.of(fmt.EVENT_END) if r.kind == fmt.KIND_COLLECTIVE]
    got = [(r.name, r.seq, r.bytes, r.flags >> 8, r.comm_rank, r.comm_size) for r in colls]
    # dtype in flags bits 8..15 is NCCL's type + 1; all-gather and
    # reduce-scatter count the whole buffer (nccl-tests), here 4 ranks.
    assert got == [("ncclAllReduce", 1, 4000, 8, 1, 4), ("ncclAllReduce", 2, 4000, 8, 1, 4),
                   ("ncclAllGather", 3, 100 * 2 * 4, 10, 1, 4),
                   ("ncclReduceScatter", 4, 50 * 2 * 4, 7, 1, 4)]
    assert len({r.comm_id for r in colls}) == 1 and colls[0].comm_id != 0


def test_group_members_are_timed_from_the_group_end(timed_region):
    # NCCL launches a group's ops at ncclGroupEnd: they were timed there, so
    # each covers the real (here zero-delay) kernel, not the enqueue.
    for name in ("ncclAllGather", "ncclReduceScatter"):
        [r] = timed_region.of(fmt.EVENT_END, name)
        assert r.flags & fmt.FLAG_DEVICE_TIMED and r.duration_ns < SLACK_NS


def test_launches_are_counted_per_kernel(timed_region):
    counts = collections.Counter()
    for r in timed_region.of(fmt.EVENT_COUNT):
        counts[(r.kind, r.name)] += r.count
    # 10 through cudaLaunchKernel and 5 through cudaLaunchKernelExC, by name;
    # the GEMMs' and collectives' kernels through the driver (cuLaunchKernel,
    # cuLaunchKernelEx), inside the hooked calls, named by cuFuncGetName.
    k = fmt.KIND_KERNEL
    assert counts == {(k, "xt_test_empty_kernel"): 15, (k, "fake_cublasGemmEx_kernel"): 3,
                      (k, "fake_cublasLtMatmul_kernel"): 1, (k, "fake_ncclAllReduce_kernel"): 2,
                      (k, "fake_ncclAllGather_kernel"): 1, (k, "fake_ncclReduceScatter_kernel"): 1}


def test_graph_capture_counts_without_timing(built, tmp_path):
    out = run_prog("capture", shm_dir=str(tmp_path), env={"XPU_TIMER_HOOK_TIME_EVERY": "1"})
    assert out.returncode == 0, out.stderr
    [region] = read_regions(str(tmp_path))
    captured, kernels = collections.Counter(), collections.Counter()
    for r in region.of(fmt.EVENT_COUNT):
        if r.kind == fmt.KIND_KERNEL:   # a launch call is counted, captured or not
            assert r.flags == 0
            kernels[r.name] += r.count
        else:
            assert r.flags == fmt.FLAG_GRAPH_CAPTURED
            captured[r.name] += r.count
    assert captured == {"cublasGemmEx": 3, "ncclAllReduce": 2}
    assert kernels == {"fake_cublasGemmEx_kernel": 4, "fake_ncclAllReduce_kernel": 2}
    [timed] = region.of(fmt.EVENT_END)  # only the call after the capture
    assert timed.name == "cublasGemmEx" and timed.flags & fmt.FLAG_DEVICE_TIMED
    assert len(region.of(fmt.EVENT_START)) == 1
