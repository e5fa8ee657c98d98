"""End to end through the real xpu_timer_launch: real torchrun, the real
collector on loopback, real py-spy/gdb dumps. The stalled-rank test runs real
gloo workers (the HANG, with the stacks of torch's all_reduce); the rest are
about the launcher, the agent and the collector, and run torch-free ranks
that write the same records through the same writer (scripts/torchless.py)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import time

import pytest

from diag.common.net import free_port
from tests.functional.launch import SCRIPTS, children_matching, launches, module_launches  # noqa: F401 (fixtures)

STALL = os.path.join(SCRIPTS, "stall.py")
TORCHLESS_STALL = os.path.join(SCRIPTS, "torchless_stall.py")   # stall.py's lines, without torch
pytestmark = pytest.mark.timeout(240)


def event_dirs(timeline) -> list[str]:
    return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(timeline, "*", "*", "hang.json")))


def frame_names(path: str) -> set[str]:
    with open(path) as f:
        return {frame["name"] for thread in json.load(f) for frame in thread["frames"]}


@pytest.fixture(scope="module")
def side_by_side(module_launches, tmp_path_factory):
    """The healthy job and the hang-action-kill job, started together: no
    time bound is judged on either, and most of the second is its hang
    timeout, its dumps and its restart. Their two tests come first, so the
    stalled job, which judges how soon its HANG came, runs on its own.
    name -> (job, its timeline directory, its job id)."""
    started = {}
    # 2 ranks (was 4): every rank's result and the clean-up are judged the same
    tmp_path, job_id = tmp_path_factory.mktemp("healthy"), f"healthy-{os.getpid()}"
    # the console script started as a user's shell does, a new interpreter
    # (the suite's other jobs fork it with torch imported: tests/functional/launch.py)
    started["healthy"] = (module_launches(
        ["--nproc-per-node", "2", "--hang-timeout", "20s", "--rdzv-id", job_id,
         "--timeline-path", str(tmp_path), TORCHLESS_STALL, "0", "20"], fresh=True), tmp_path, job_id)
    # 3 ranks (was 4): rank 2 stalls, the others hang waiting for it, all are restarted
    tmp_path = tmp_path_factory.mktemp("restarted")
    started["restarted"] = (module_launches(
        ["--nproc-per-node", "3", "--hang-timeout", "4s", "--hang-action", "kill",
         "--max-restarts", "1", "--timeline-path", str(tmp_path), TORCHLESS_STALL, "600", "8"],
        env={"XPU_TIMER_DUMP_TOOLS": "py-spy"}), tmp_path, None)  # gdb: seconds per rank
    return started


def test_healthy_job_exits_zero_with_no_hang(side_by_side):
    job, tmp_path, job_id = side_by_side["healthy"]
    assert job.wait(180) == 0, job.output()
    assert len(job.matching(r"^DONE rank=\d restart=0 value=")) == 2, job.output()
    assert job.matching(r"agent connected"), job.output()
    assert not job.matching(r"HANG"), job.output()
    assert event_dirs(tmp_path) == []
    assert not job.matching(r"Traceback|switched off"), job.output()
    assert glob.glob(f"/dev/shm/xpu_diag-{job_id}-*") == []   # the launcher cleaned up


def test_hang_action_kill_lets_torchrun_restart_the_workers(side_by_side):
    job, tmp_path, _ = side_by_side["restarted"]
    assert job.wait(200) == 0, job.output()
    assert job.matching(r"^HANG: "), job.output()
    done = job.matching(r"^DONE rank=")
    assert sorted(done) == [f"DONE rank={r} restart=1 value=1" for r in range(3)], job.output()
    assert len(_wait_for_stacks(tmp_path, 3, 5)) > 0


def test_stalled_rank_is_flagged_with_stacks_of_all_ranks(launches, tmp_path):
    timeout = 4.0
    # 3 torch ranks (was 4): rank 2 stalls, the others wait for it in all_reduce;
    # a culprit inside the range (ranks 0-1,3) is judged by the two-node jobs below
    job = launches(["--nproc-per-node", "3", "--hang-timeout", f"{timeout}s",
                    "--timeline-path", str(tmp_path), "--rdzv-id", "stalltest",
                    STALL, "300", "8"],
                   env={"XPU_TIMER_TRACER_PID": "1"})   # stale, inherited: must not switch the tracer off
    stall = job.wait_line(r"^STALL ", 120)
    assert stall is not None, job.output()
    stalled_at = float(stall[1].split()[1])
    hang = job.wait_line(r"^HANG: ", timeout + 30)
    assert hang is not None, job.output()
    assert hang[0] - stalled_at <= timeout + 2.0, f"flagged {hang[0] - stalled_at:.1f} s after the stall"
    assert "ranks 0-1 in all_reduce" in hang[1] and "rank 2 not in any collective" in hang[1], hang[1]

    event = _wait_for_stacks(tmp_path, 3, 90)
    assert event.startswith(str(tmp_path / "stalltest")), event
    said = job.wait_line(r"^STACKS: ", 120)   # once every rank's dumpers are done
    assert said is not None and said[1].endswith(
        f"stacks of 3 rank(s) are in; see them with: stack-viewer --path {event}"), job.output()
    assert "wait_for_data" in frame_names(os.path.join(event, "rank00002-of-00003.py.json"))
    for rank in (0, 1):
        names = frame_names(os.path.join(event, f"rank{rank:05d}-of-00003.py.json"))
        assert "all_reduce" in names and "wait_for_data" not in names, (rank, names)
    with open(os.path.join(event, "hang.json")) as f:
        summary = json.load(f)
    assert summary["hung_ranks"] == [0, 1] and summary["world_size"] == 3
    # The default native dumper: eu-stack where installed, else gdb.
    native = next(((t, marker) for t, marker in (("eu-stack", "TID "), ("gdb", "Thread ")) if shutil.which(t)),
                  None)
    if native is not None:
        with open(os.path.join(event, f"rank00002-of-00003.{native[0]}.txt")) as f:
            assert native[1] in f.read()
    # A hang report never ends the job by itself: it is still running.
    assert job.proc.poll() is None
    job.proc.send_signal(signal.SIGTERM)
    assert job.wait(60) != 0


def _wait_for_stacks(timeline, world, timeout, *jobs) -> str:
    """The event directory that holds every rank's py-spy stacks; ``jobs``:
    whose output a failure shows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in event_dirs(timeline):
            if all(os.path.exists(os.path.join(event, f"rank{r:05d}-of-{world:05d}.py.json"))
                   for r in range(world)):
                return event
        time.sleep(0.5)
    raise AssertionError(f"no event with py-spy stacks of {world} ranks under {timeline}: "
                         f"{glob.glob(os.path.join(str(timeline), '**'), recursive=True)}\n"
                         + "\n".join(job.output() for job in jobs))


def test_training_completes_when_the_collector_is_killed(launches, tmp_path):
    # 2 ranks (was 4): training goes on without the collector on each of them
    job = launches(["--nproc-per-node", "2", "--hang-timeout", "20s",
                    "--timeline-path", str(tmp_path), TORCHLESS_STALL, "0", "80"])
    assert job.wait_line(r"agent connected", 120), job.output()
    collectors = children_matching(job.proc.pid, "diag.collector")
    assert len(collectors) == 1, job.output()
    os.kill(collectors[0], signal.SIGKILL)
    assert job.wait(180) == 0, job.output()
    assert len(job.matching(r"^DONE rank=\d restart=0 value=1$")) == 2, job.output()
    assert job.matching(r"xpu-diag agent .*unreachable"), job.output()


# The rest of the bad-option cases are unit tests of parse_args (tests/launcher).
BAD_OPTIONS = [
    (["--hang-timeout", "soon", STALL], "--hang-timeout"),
    (["--timeline-path", "{file}/timeline", STALL], "--timeline-path"),
    (["--timeline-path", "/proc/nope", STALL], "--timeline-path"),   # was: exit 0, no hang detection
    (["--nproc-per-node", "2"], "training script"),
]


@pytest.fixture(scope="module")
def bad_option_jobs(module_launches, tmp_path_factory):
    """One launcher per case of BAD_OPTIONS, started together (each is a
    launcher's start-up and nothing else), in BAD_OPTIONS' order."""
    file = tmp_path_factory.mktemp("bad") / "file"
    file.write_text("not a directory")
    return [module_launches([a.replace("{file}", str(file)) for a in args]) for args, _ in BAD_OPTIONS]


@pytest.mark.parametrize("args, option", BAD_OPTIONS)
def test_bad_options_give_one_line_errors(bad_option_jobs, args, option):
    job = bad_option_jobs[BAD_OPTIONS.index((args, option))]
    assert job.wait(120) == 2
    err = [line for _, stream, line in job.lines if stream == "err" and line.strip()]
    assert len(err) == 1 and option in err[0] and err[0].startswith("xpu_timer_launch: "), err


def _two_nodes(launches, tmp_path, relay):
    """Two launchers on this host play nodes 0 and 1 (static rendezvous); node
    1's agent dials the collector that node 0 started at master port + 1.
    Returns (node0, node1, port, release): rank 2 (node 1) stalls until the
    file ``release`` exists."""
    port = free_port()       # below the ephemeral range: an outgoing connection never takes it, nor port + 1
    # Rank 2's stall ends once every rank's stacks are in (was: a fixed 15 s,
    # long enough on a loaded machine for the HANG at 4 s and the dumps).
    release = tmp_path / "release"
    env = {"XPU_TIMER_JOB_TOKEN": "shared-by-the-scheduler", "XPU_TIMER_DUMP_TOOLS": "py-spy",
           "STALL_RELEASE": str(release)}
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
              "--master-port", str(port), "--hang-timeout", "4s", "--rdzv-id", "twonodes",
              "--timeline-path", str(tmp_path)] + (["--nodes-per-relay", "2"] if relay else []) \
        + [TORCHLESS_STALL, "120", "8"]
    node1 = launches(["--node-rank", "1"] + common, env=env)
    node0 = launches(["--node-rank", "0"] + common, env=env)
    return node0, node1, port, release


@pytest.fixture(scope="module")
def two_node_jobs(module_launches, tmp_path_factory):
    """Both two-node jobs, direct and through a relay, started together: most
    of each is the wait for the HANG and the dumps. relay -> (node0, node1,
    master port, release file, timeline)."""
    jobs = {}
    for relay in (False, True):
        timeline = tmp_path_factory.mktemp("relay" if relay else "direct")
        jobs[relay] = _two_nodes(module_launches, timeline, relay) + (timeline,)
    return jobs


@pytest.mark.parametrize("relay", [False, True], ids=["direct", "through-a-relay"])
def test_two_nodes_share_node_zeros_collector(two_node_jobs, relay):
    """Node 1 reports to node 0's collector (see _two_nodes). Through a relay
    (--nodes-per-relay 2): one of the two agents serves the group's report
    relay and both report through it; the HANG and the stacks come as
    without it."""
    node0, node1, port, release, tmp_path = two_node_jobs[relay]
    assert node0.wait_line(r"^HANG: ", 150), node0.output() + node1.output()
    event = _wait_for_stacks(tmp_path, 4, 60, node0, node1)
    released = time.time()
    release.touch()
    assert node0.wait(180) == 0 and node1.wait(60) == 0, node0.output() + node1.output()
    assert node0.matching(r"serving job twonodes on 127\.0\.0\.1:%d" % (port + 1))
    if relay:
        # Judged up to the release, while the job ran: its end is a race
        # between the nodes. Node 0's collector (and the relay it served) can
        # stop first; node 1's agent, its relay gone, then says so and serves
        # another for the moments it has left.
        assert node0.matching(r"relay of nodes 0-1 linked: 127\.0\.0\.1:\d+", released), node0.output()
        served = [line for node in (node0, node1)
                  for line in node.matching(r"serving the report relay of nodes 0-1", released)]
        assert len(served) == 1, node0.output() + node1.output()
        # each agent connected twice: directly, then through the relay
        assert len(node0.matching(r"agent connected: node [01]", released)) == 4, node0.output()
        assert not [line for node in (node0, node1) for line in node.matching(r"report relay at .* failed", released)]
    else:
        assert len(node0.matching(r"agent connected: node [01]")) == 2, node0.output()
    assert node0.matching(r"^HANG: ranks 0-1,3 in all_reduce"), node0.output()
    assert "wait_for_data" in frame_names(os.path.join(event, "rank00002-of-00004.py.json"))
