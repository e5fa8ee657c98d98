"""Device-timed spans from the hook land on the GPU tracks of the timeline,
with the durations the fake device was told to take (FAKE_DELAY_US). The
real sampler feeds the real ring, as in the agent; only the process checks
are stood in for, since the program has exited by the time it is read."""

from diag.agent.sampler import Sampler
from diag.agent.state import NodeState
from diag.timeline import trace, wire
from diag.timeline.ring import TimelineRing
from tests.kernel_hook.conftest import run_prog
from tests.kernel_hook.test_timing import DELAYS_US, SLACK_NS
from tests.timeline.trace_check import check


def test_device_timed_ops_are_gpu_spans_with_the_simulated_durations(built, tmp_path):
    out = run_prog("timed", shm_dir=str(tmp_path), env={
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "XPU_TIMER_HOOK_TIME_EVERY": "1",
        "FAKE_DELAY_US": ",".join(f"{k}={v}" for k, v in DELAYS_US.items())})
    assert out.returncode == 0, out.stderr
    ring = TimelineRing(30 * 10**9)
    sampler = Sampler(str(tmp_path), NodeState(timeline=ring), 0, print, is_alive=lambda pid: False,
                      is_descendant=lambda pid, root: True)
    sampler.sample()
    up = wire.build_upload(ring.snapshot(0), offset_ns=wire.clock_offset_ns(), job_id="j",
                           request_id="r", node_rank=0, hostname="h", window_ns=ring.window_ns)
    tracks = check(trace.build([up], job_id="j", request="r"))
    by_track = {}
    for (pid, tid), events in tracks.items():
        assert pid == 2   # rank 1
        for e in events:
            by_track.setdefault(tid, []).append(e)
    gemm_tid, nccl_tid = trace.TRACK_GEMM[0], trace.TRACK_NCCL[0]
    assert set(by_track) <= {gemm_tid, gemm_tid + 1, nccl_tid, nccl_tid + 1}   # no CPU track
    gemms = [e for tid in (gemm_tid, gemm_tid + 1) for e in by_track.get(tid, [])]
    nccl = [e for tid in (nccl_tid, nccl_tid + 1) for e in by_track.get(tid, [])]
    assert sorted(e["name"] for e in gemms) == ["cublasGemmEx"] * 3 + ["cublasLtMatmul"]
    assert sorted(e["name"] for e in nccl) == ["ncclAllGather", "ncclAllReduce", "ncclAllReduce",
                                               "ncclReduceScatter"]
    for e in gemms + nccl:
        assert e["args"]["device_timed"] is True and e["cat"] == "gpu"
        want = DELAYS_US.get(e["name"], 0)
        assert want <= e["dur"] < want + SLACK_NS / 1000, e
    assert [e["args"]["seq"] for e in nccl if e["name"] == "ncclAllReduce"] == [1, 2]
    # One fake stream runs its ops one after another. A span is placed by the
    # time the drainer saw it end, minus its device duration: two spans that
    # overlap do so by no more than the drainer's lag (docs/timeline.md).
    ordered = sorted(gemms + nccl, key=lambda e: e["ts"])
    overlaps = [a["ts"] + a["dur"] - b["ts"] for a, b in zip(ordered, ordered[1:])]
    print("GPU spans (name, ts, dur) µs:", [(e["name"], e["ts"], e["dur"]) for e in ordered])
    assert max(overlaps) < SLACK_NS / 1000, overlaps
