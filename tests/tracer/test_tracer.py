"""The tracer in real gloo processes, injected the way the launcher does it."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from diag.common.net import free_port
from diag.launcher.runner import BOOTSTRAP_DIR
from diag.records import format as fmt
from diag.records.reader import RegionReader

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "scripts")
pytestmark = pytest.mark.timeout(120)


EXIT_RACE = "terminate called without an active exception"   # gloo's abort at interpreter exit


def run_ranks(script, shm_dir, extra_env=None, world=2, pythonpath=BOOTSTRAP_DIR, args=(), rerun=False):
    """Run ``script`` as ``world`` gloo ranks, as torchrun would; returns outputs by rank."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank),
                   XPU_TIMER_SHM_DIR=str(shm_dir), PYTHONPATH=pythonpath,
                   PYTHONWARNINGS="ignore")
        env.pop("XPU_TIMER_TRACER_PID", None)
        env.update(extra_env or {})
        procs.append(subprocess.Popen([sys.executable, os.path.join(SCRIPTS, script), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=100)
        if (proc.returncode != 0 and EXIT_RACE in stderr and (extra_env or {}).get("XPU_TIMER_TRACER_DISABLE") == "1"
                and not rerun):
            # The untraced baseline, plain torch: gloo's thread and the
            # interpreter's exit raced after the ranks finished (CI, 2 cores
            # under load). It is the baseline, not the tracer: run it again, once.
            for other in procs:
                other.kill()
                other.communicate()
            return run_ranks(script, shm_dir, extra_env, world, pythonpath, args, rerun=True)
        assert proc.returncode == 0, stderr
        out.append((stdout, stderr))
    return out


def records_by_rank(shm_dir):
    regions = {}
    for path in glob.glob(os.path.join(str(shm_dir), "py-r*.ring")):
        reader = RegionReader(path)
        regions[reader.header.rank] = (reader.header, reader.drain(), reader.dropped)
    return regions


def result_lines(outputs):
    return [next(line for line in out.splitlines() if line.startswith("RESULT")) for out, _ in outputs]


@pytest.fixture(scope="module")
def untraced_collectives(tmp_path_factory):
    """collectives.py's RESULT lines with the tracer switched off, run once:
    the baseline every traced run of it must match (its results are the
    same on every run; a run is two torch ranks)."""
    off = tmp_path_factory.mktemp("off")
    plain = run_ranks("collectives.py", off, {"XPU_TIMER_TRACER_DISABLE": "1"})
    assert not os.listdir(off)                            # switched off: no region made
    return result_lines(plain)


def test_collectives_p2p_and_host_functions_are_recorded(tmp_path, untraced_collectives):
    env = {"XPU_TIMER_HOST_TRACING_FUNC": "json@@dumps,json@JSONEncoder@encode"}
    outputs = run_ranks("collectives.py", tmp_path, env)
    regions = records_by_rank(tmp_path)
    assert sorted(regions) == [0, 1]
    for rank, (header, records, dropped) in regions.items():
        assert (header.producer, header.world_size, header.local_rank, dropped) == (
            fmt.PRODUCER_PYTHON, 2, rank, 0)
        starts = [r for r in records if r.event == fmt.EVENT_START]
        ends = {r.op_id: r for r in records if r.event == fmt.EVENT_END}
        assert set(ends) == {r.op_id for r in starts}    # every op ended, async ones too
        names = [r.name for r in starts]
        p2p = ["send", "isend", "batch_isend_irecv"] if rank == 0 else ["recv", "irecv", "batch_isend_irecv"]
        assert names == ["all_reduce", "broadcast", "barrier", "all_reduce", "all_gather",
                         *p2p, "dumps", "JSONEncoder.encode"]
        world = [(r.name, r.seq) for r in starts if r.comm_id == 0 and r.kind == fmt.KIND_COLLECTIVE]
        assert world == [("all_reduce", 1), ("broadcast", 2), ("barrier", 3), ("all_reduce", 4)]
        sub = [r for r in starts if r.name == "all_gather"][0]
        assert sub.comm_id != 0 and sub.seq == 1 and sub.comm_size == 2 and sub.comm_rank == rank
        assert all(r.kind == fmt.KIND_P2P and r.seq == 0 for r in starts if r.name in p2p)
        assert starts[0].bytes == 16                      # 4 float32
        # Fingerprint fields, NCCL numbering: float32 (7), sum (0), broadcast's root 0, send/recv's peer.
        args = {r.name: (fmt.dtype_of(r.flags), *fmt.unpack_coll_args(r.flops)) for r in starts}
        assert args["all_reduce"] == (7, 0, -1) and args["broadcast"] == (7, -1, 0)
        assert args["send" if rank == 0 else "recv"] == (7, -1, 1 - rank)
        groups = [(r.comm_id, r.name, r.comm_rank, r.comm_size) for r in records if r.event == fmt.EVENT_GROUP]
        assert groups == [(0, "default", rank, 2), (sub.comm_id, groups[1][1], rank, 2)]
        assert groups[1][1].startswith("pg ")
        assert all(r.kind == fmt.KIND_HOST_FUNC for r in starts[-2:])
        assert all(ends[r.op_id].t_mono_ns >= r.t_mono_ns for r in starts)
    sub_ids = {[r for r in recs if r.name == "all_gather"][0].comm_id for _, recs, _ in regions.values()}
    assert len(sub_ids) == 1                              # equal on every member rank
    # Same results with the tracer switched off.
    assert result_lines(outputs) == untraced_collectives


def test_async_op_ends_when_the_work_completes_without_blocking(tmp_path):
    outputs = run_ranks("async_pending.py", tmp_path)
    posted = float(outputs[0][0].split("POSTED ")[1].split()[0])
    assert posted < 0.5                                   # irecv returned at once
    records = records_by_rank(tmp_path)[0][1]
    start = next(r for r in records if r.name == "irecv" and r.event == fmt.EVENT_START)
    end = next(r for r in records if r.op_id == start.op_id and r.event == fmt.EVENT_END)
    # The sender waits 1.5 s: END is stamped at completion, not when irecv returned.
    assert end.t_mono_ns - start.t_mono_ns > 1.0e9 and end.duration_ns > 1.0e9
    assert "RESULT [1.0, 1.0, 1.0, 1.0]" in outputs[0][0]


def test_unusable_shm_dir_switches_off_with_one_line(tmp_path, untraced_collectives):
    blocker = tmp_path / "file"
    blocker.write_text("")
    outputs = run_ranks("collectives.py", blocker)
    assert result_lines(outputs) == untraced_collectives, outputs
    for rank, (_, stderr) in enumerate(outputs):
        lines = [line for line in stderr.splitlines() if "xpu-diag" in line]
        # (once seen failing on CI-like load with only the expected line in
        # view: keep every rank's whole output in the message)
        assert len(lines) == 1 and "switched off" in lines[0], (rank, lines, outputs)


def test_bootstrap_chains_to_the_users_sitecustomize(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE_RAN = True\n")
    shm = tmp_path / "shm"
    shm.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([BOOTSTRAP_DIR, str(user)]), RANK="5",
               LOCAL_RANK="1", WORLD_SIZE="8", XPU_TIMER_SHM_DIR=str(shm))
    env.pop("XPU_TIMER_TRACER_PID", None)
    code = ("import builtins, os, diag.tracer.core as c; "
            "print(getattr(builtins, 'USER_SITE_RAN', False), c.active() is not None, "
            "os.environ['XPU_TIMER_TRACER_PID'] == str(os.getpid()))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["True", "True", "True"], out.stderr
    assert [os.path.basename(p)[:5] for p in glob.glob(str(shm / "*.ring"))] == ["py-r5"]


def test_full_ring_drops_and_counts_and_training_goes_on(tmp_path, untraced_collectives):
    # Nobody drains the 4-slot rings: most records are dropped, none blocks.
    outputs = run_ranks("collectives.py", tmp_path, {"XPU_TIMER_RING_CAPACITY": "4"})
    assert result_lines(outputs) == untraced_collectives
    for header, records, dropped in records_by_rank(tmp_path).values():
        assert header.capacity == 4 and len(records) == 4 and dropped > 10


@pytest.fixture(scope="module")
def optimizer_run(tmp_path_factory):
    """One traced rank of optim_gc.py (5 AdamW steps, a gc.collect() in each,
    a 20 ms sleep before each): its stdout and (header, records) of its
    region. The step records and the gc records are judged apart, by the two
    tests that follow; one torch rank serves both."""
    shm = tmp_path_factory.mktemp("optim")
    [(stdout, _)] = run_ranks("optim_gc.py", shm, world=1)
    [(header, records, _)] = records_by_rank(shm).values()
    return stdout, header, records


def test_optimizer_steps_are_recorded_as_ends_that_are_never_in_flight(optimizer_run):
    """torch.optim's step() is traced by default (the performance view's step
    time): one END per step with its host duration, and no START, so a step is
    never the op a hang report names."""
    from diag.agent.state import NodeState
    from diag.perf import derive
    from diag.perf.window import PerfWindow
    _, header, records = optimizer_run
    steps = [r for r in records if r.name == "optimizer.step"]
    assert [r.event for r in steps] == [fmt.EVENT_END] * 5
    assert all(r.kind == fmt.KIND_HOST_FUNC and 0 < r.duration_ns < 10**9 for r in steps)
    state = NodeState(perf=PerfWindow())
    state.add_region("r", header)
    state.apply("r", records)
    [progress] = state.report()
    assert not progress.HasField("oldest_in_flight")
    fig = derive.figures(0, progress.perf)
    assert fig.steps == 4 and fig.step_s >= 0.02   # each step follows a 20 ms sleep


def test_garbage_collection_time_rides_along_with_the_steps(optimizer_run):
    """The gc callback only counts; the time is written at the next step, as
    one ``gc`` END per step that had collections, since the previous one: at least the script's own
    gc.collect(), at most the whole step (building the heap collects too)."""
    out, _, records = optimizer_run
    measured = [tuple(map(float, line.split()[1:])) for line in out.splitlines() if line.startswith("GC_MS")]
    gcs = [r for r in records if r.name == "gc"]
    assert len(gcs) == 5 and all(r.event == fmt.EVENT_END and r.kind == fmt.KIND_HOST_FUNC for r in gcs)
    # the first also holds what was collected since torch.optim was imported
    assert gcs[0].duration_ns / 1e6 >= 0.95 * measured[0][0]
    for rec, (collect_ms, step_ms) in zip(gcs[1:], measured[1:]):
        assert 0.95 * collect_ms <= rec.duration_ns / 1e6 <= step_ms, (rec.duration_ns, collect_ms, step_ms)


def test_tracer_keeps_no_process_group_alive(tmp_path):
    # A group that outlives destroy_process_group() is torn down at interpreter
    # exit, where gloo aborts the worker (issue 11: SIGABRT, "terminate called
    # without an active exception"). The tracer must hold groups weakly.
    outputs = run_ranks("pg_freed.py", tmp_path)
    assert [line for out, _ in outputs for line in out.splitlines()
            if line.startswith("ALIVE")] == ["ALIVE 0", "ALIVE 0"], outputs
    assert all(len(records) >= 3 for _, records, _ in records_by_rank(tmp_path).values())


def test_single_variants_and_works_without_completion_end_and_do_not_freeze_the_group(tmp_path):
    # gloo's reduce_scatter_single work never reports is_completed(), even
    # after wait() returns; the ops after it on the group must still end.
    outputs = run_ranks("rs_single.py", tmp_path, args=("1.5",))
    plain = run_ranks("rs_single.py", tmp_path / "off", {"XPU_TIMER_TRACER_DISABLE": "1"})
    assert result_lines(outputs) == result_lines(plain)
    for _, records, _ in records_by_rank(tmp_path).values():
        starts = [r for r in records if r.event == fmt.EVENT_START]
        ends = {r.op_id: r for r in records if r.event == fmt.EVENT_END}
        assert [r.name for r in starts] == ["reduce_scatter_single", "reduce_scatter_single",
                                            "all_gather_single"] * 3 + ["all_reduce"]
        assert [r.seq for r in starts] == list(range(1, 11))
        assert {r.op_id for r in starts} <= set(ends)       # nothing left in flight while idle
        lane = [r.seq for r in records if r.event == fmt.EVENT_END and r.kind == fmt.KIND_COLLECTIVE]
        assert lane == sorted(lane)                          # a group's ops end in start order


@pytest.mark.quiet   # it judges milliseconds: even a low-priority neighbour's slice reads as its own
def test_cpp_issued_collective_is_timed_from_its_real_end(tmp_path):
    # Issued past the Python wrappers (as DDP's reducer does) and waited 50 ms
    # late: END is stamped when the op completed, not when someone looked.
    outputs = run_ranks("cpp_timing.py", tmp_path)
    for rank, (_, records, _) in records_by_rank(tmp_path).items():
        truth = int(outputs[rank][0].split("SYNC_NS ")[1].split()[0])
        late = [r.duration_ns for r in records if r.event == fmt.EVENT_END and r.name == "all_reduce"][20:40]
        assert len(late) == 20
        median = sorted(late)[10]
        # docs/tracer.md's limit: stamped at most 5 ms (the watcher's look)
        # after the real end; the failure this guards is the 50 ms-late wait.
        # Twice in CI-path runs (never alone) the median was truth + 3 ms.
        assert median < 1.5 * truth + 5_000_000, (median, truth)
