"""How the hook knows an unsampled collective has completed on the device.

By default (XPU_TIMER_HOOK_COMPLETION=fence) the launching thread records no
event for it: the drainer records one fence event per stream and pass after it
sees the op published, and the op's END waits for that fence. Ops launched
within one pass share a fence, so a hang inside a burst shows the whole burst
in flight. XPU_TIMER_HOOK_COMPLETION=event records one untimed end event per op
at launch instead: exact per op, at one event record's cost per call.

The fence must never land on a stream under capture (it would change the
application's graph) or on a destroyed stream (a real driver may crash): the
fake runtime fails the capture, or aborts, when that happens."""

import re

import pytest

from diag.records import format as fmt
from tests.kernel_hook.conftest import read_regions, run_prog

N = 64


def _records(out) -> tuple[int, int]:
    m = re.search(r"event records app (\d+) drainer (\d+)", out.stdout)
    assert m, out.stdout + out.stderr
    return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize("mode", ["fence", "event"])
def test_launch_path_records_events_only_for_sampled_ops_with_fences(built, tmp_path, mode):
    out = run_prog("sampled", str(N), shm_dir=str(tmp_path),
                   env={"FAKE_DELAY_US": "ncclAllReduce=500", "XPU_TIMER_HOOK_COMPLETION": mode})
    assert out.returncode == 0 and out.stderr == "", out.stderr
    [region] = read_regions(str(tmp_path))
    ends = region.of(fmt.EVENT_END)
    assert len(ends) == 2 * N and not any(r.flags & fmt.FLAG_FAILED for r in ends)
    timed = sum(1 for r in ends if r.flags & fmt.FLAG_DEVICE_TIMED)
    unsampled_colls = sum(1 for r in region.of(fmt.EVENT_END, "ncclAllReduce")
                          if not r.flags & fmt.FLAG_DEVICE_TIMED)
    app, drainer = _records(out)
    if mode == "fence":
        assert app == 2 * timed  # start and end of the sampled ones only
        assert 1 <= drainer <= unsampled_colls
    else:
        assert app == 2 * timed + unsampled_colls and drainer == 0


def _hang_ends(tmp_path, mode: str, gap_ms: int) -> list[int]:
    """Seqs of the all-reduces that got an END when the 2nd of 3 never finishes."""
    out = run_prog("hang", "1", shm_dir=str(tmp_path),
                   env={"FAKE_HANG": "ncclAllReduce:2", "HANG_GAP_MS": str(gap_ms),
                        "XPU_TIMER_HOOK_COMPLETION": mode, "XPU_TIMER_HOOK_TIME_EVERY": "1000"})
    assert out.returncode == 0, out.stderr
    [region] = read_regions(str(tmp_path))
    assert [r.seq for r in region.of(fmt.EVENT_START, "ncclAllReduce")] == [1, 2, 3]
    return [r.seq for r in region.of(fmt.EVENT_END, "ncclAllReduce")]


@pytest.mark.parametrize("mode,gap_ms", [("event", 0), ("fence", 20)])
def test_a_hung_collective_is_told_apart_exactly(built, tmp_path, mode, gap_ms):
    # event: an end event per op; fence with a pass between launches: a fence each.
    assert _hang_ends(tmp_path, mode, gap_ms) == [1]


def test_a_burst_shares_its_fence_and_the_hung_op_never_ends(built, tmp_path):
    # Back to back, the three usually share one fence (all three stay in flight:
    # the reported op is the burst's first); a drainer pass may still fall
    # after the first launch. Either way the hung op and the one behind it
    # never end.
    assert _hang_ends(tmp_path, "fence", 0) in ([], [1])


@pytest.mark.quiet     # a ring with no reader: the count only holds when the poller keeps pace
def test_no_fence_lands_inside_a_capture(built, tmp_path):
    out = run_prog("capture_race", "1500", shm_dir=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "captures failed 0" in out.stdout
    [region] = read_regions(str(tmp_path))
    ends = region.of(fmt.EVENT_END, "ncclAllReduce")
    assert len(ends) == 1500 and not any(r.flags & fmt.FLAG_FAILED for r in ends)


@pytest.mark.quiet
def test_no_fence_lands_on_a_destroyed_stream(built, tmp_path):
    # 900 rounds: 3,600 records, within the region's ring (no reader drains it
    # here), and the counts written at exit within the three quarters of it
    # that records of no collective may fill (docs/records.md).
    out = run_prog("destroy_race", "900", shm_dir=str(tmp_path),
                   env={"FAKE_DELAY_US": "ncclAllReduce=20", "XPU_TIMER_RING_CAPACITY": "8192"})
    assert out.returncode == 0, out.stderr  # the fake aborts on a destroyed stream's use
    assert "destroyed 900" in out.stdout
    [region] = read_regions(str(tmp_path))
    assert len(region.of(fmt.EVENT_END, "ncclAllReduce")) == 1800 and region.dropped == 0


def test_a_bad_completion_mode_is_one_line_and_falls_back_to_fences(built, tmp_path):
    out = run_prog("sampled", "4", shm_dir=str(tmp_path),
                   env={"XPU_TIMER_HOOK_COMPLETION": "sometimes"})
    assert out.returncode == 0
    assert out.stderr.count("\n") == 1 and "XPU_TIMER_HOOK_COMPLETION=sometimes" in out.stderr
    assert _records(out)[1] >= 1
