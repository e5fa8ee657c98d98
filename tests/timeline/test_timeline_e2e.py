"""End to end: a held hang of a 4-rank job under xpu_timer_launch (real
torchrun, tracer, agent, collector on loopback). Its HANG event gets
timeline.json, and ``xpu-diag timeline`` fetches one from the running job.
Both are compared with the tracer's own records, read from the ranks'
shared-memory regions without consuming them. The ranks are torch-free
(scripts/torchless.py: START and END through the Tracer and RecordWriter a
gloo rank uses): the timeline is the collector's, not torch's."""

from __future__ import annotations

import glob
import json
import mmap
import os
import socket
import subprocess
import sys
import tempfile

import pytest

from diag.records import format as fmt
from tests.functional.launch import ROOT, SCRIPTS, Launch
from tests.timeline import perfetto_ui
from tests.timeline.test_perfetto import ERRORS, PER_TRACK
from tests.timeline.trace_check import check
from tests.waiting import wait_for

JOB = f"tl-{os.getpid()}"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    """A job whose rank 2 stalls before its 4th all_reduce; the rest wait in it."""
    timeline = tmp_path_factory.mktemp("timeline")
    job = Launch(["--nproc-per-node", "4", "--hang-timeout", "4s", "--rdzv-id", JOB,
                  "--timeline-path", str(timeline), os.path.join(SCRIPTS, "torchless_stall.py"), "300", "8"],
                 env={"XPU_TIMER_DUMP_TOOLS": "py-spy"})
    try:
        assert job.wait_line(r"^HANG: ", 150) is not None, job.output()
        regions = wait_for(lambda: _tracer_records(), "the tracer regions", 10)
        path = wait_for(lambda: glob.glob(str(timeline / JOB / "*" / "timeline.json")),
                        "timeline.json in the event directory", 30)[0]
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        yield job, timeline, doc, regions
    finally:
        job.kill()


def _tracer_records() -> dict[int, list[fmt.Record]]:
    """rank -> every record still in its tracer ring, read-only (the agent's
    read index is left alone; the slots keep what it consumed)."""
    out = {}
    # Where the launcher made its region directory: /dev/shm, else the temp dir.
    found = [p for base in ("/dev/shm", tempfile.gettempdir())
             for p in glob.glob(f"{base}/xpu_diag-{JOB}-n0-*/py-r*-p*.ring")]
    for path in found:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            header = fmt.Header.unpack(mm, path)
            write_idx = fmt.U64.unpack_from(mm, fmt.OFF_WRITE_IDX)[0]
            first = max(0, write_idx - header.capacity)
            out[header.rank] = [fmt.Record.unpack_from(mm, fmt.HEADER_SIZE + (i % header.capacity)
                                                       * fmt.RECORD_SIZE)
                                for i in range(first, write_idx)]
    return out if len(out) == 4 else None


def _all_reduces(tracks: dict, pid: int) -> list[dict]:
    return [e for (p, _), events in tracks.items() if p == pid for e in events
            if e["name"] == "all_reduce"]


def test_hang_event_timeline_has_every_rank_with_the_tracers_durations(held):
    _, _, doc, records = held
    tracks = check(doc)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    host = socket.gethostname()
    assert names == {r + 1: f"rank {r} ({host}, local rank {r})" for r in range(4)}
    for rank in range(4):
        ends = [r for r in records[rank] if r.event == fmt.EVENT_END and r.name == "all_reduce"]
        spans = _all_reduces(tracks, rank + 1)
        done = sorted((e["args"]["seq"], e["dur"]) for e in spans if not e["args"].get("in_flight"))
        # Every all_reduce the tracer ended, with the duration it recorded.
        assert done == sorted((r.seq, round(r.duration_ns / 1000, 3)) for r in ends), rank
        assert len(done) >= 3
        by_time = sorted(spans, key=lambda e: e["ts"])
        assert [e["args"]["seq"] for e in by_time] == sorted(e["args"]["seq"] for e in spans)
        in_flight = [e for e in spans if e["args"].get("in_flight")]
        if rank == 2:   # the rank that never arrived
            assert in_flight == []
        else:           # stuck in the next all_reduce since about the stall
            [stuck] = in_flight
            assert stuck["args"]["seq"] == done[-1][0] + 1 and stuck["dur"] > 3e6
    # One wall clock: all ranks leave all_reduce seq s at about the same time.
    for seq in (1, 2, 3):
        ends = [e["ts"] + e["dur"] for r in range(4) for e in _all_reduces(tracks, r + 1)
                if e["args"]["seq"] == seq]
        assert len(ends) == 4 and max(ends) - min(ends) < 250_000, (seq, ends)
    assert doc["otherData"]["nodes_missing"] == [] and doc["otherData"]["job_id"] == JOB


def _cli(*args, env=None):
    e = dict(os.environ)
    e.pop("XPU_TIMER_JOB_TOKEN", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "diag.cli", "timeline", *args], cwd=ROOT, env=e,
                          capture_output=True, text=True, timeout=60)


def test_on_demand_timeline_from_the_running_job(held, tmp_path):
    job, timeline, _, _ = held
    out = tmp_path / "now.json"
    proc = _cli("--job", str(timeline / JOB), "--last", "60s", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("xpu-diag timeline: 4 rank(s)") and str(out) in proc.stdout
    doc = json.loads(out.read_text())
    tracks = check(doc)
    assert {p for p, _ in tracks} == {1, 2, 3, 4}
    stuck = [e for r in (0, 1, 3) for e in _all_reduces(tracks, r + 1) if e["args"].get("in_flight")]
    assert len(stuck) == 3 and all(e["dur"] > 4e6 for e in stuck)   # still held, for longer now
    assert job.proc.poll() is None
    # --collector with the token: the same answer; --last cuts what ended earlier.
    with open(timeline / JOB / "collector.json") as f:
        access = json.load(f)
    proc = _cli("--collector", access["address"], "--last", "1s", "--out", str(out),
                env={"XPU_TIMER_JOB_TOKEN": access["token"]})
    assert proc.returncode == 0, proc.stderr
    recent = check(json.loads(out.read_text()))
    assert all(e["args"].get("in_flight") for events in recent.values() for e in events)


@pytest.mark.parametrize("args, fix", [
    (["--collector", "127.0.0.1:9", "--out", "x.json"], "XPU_TIMER_JOB_TOKEN"),
    (["--job", "/nonexistent", "--out", "x.json"], "<timeline-path>/<job-id> of a running job"),
    (["--job", "/tmp", "--last", "soon", "--out", "x.json"], "--last"),
    (["--job", "/tmp", "--out", "/nonexistent/x.json"], "--out"),
])
def test_bad_input_is_one_line(args, fix):
    proc = _cli(*args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and fix in lines[0], proc.stderr
    assert lines[0].startswith("xpu-diag timeline: error: ")


@pytest.mark.skipif(perfetto_ui.available() is not None, reason=str(perfetto_ui.available()))
def test_perfetto_reads_the_hang_timeline_whole(held):
    _, _, doc, _ = held
    ours = check(doc)
    with perfetto_ui.PerfettoUI(json.dumps(doc).encode()) as ui:
        theirs = {(r["pid"], r["tid"]): r for r in ui.query(PER_TRACK)}
        errors = ui.query(ERRORS)
    assert errors == [] and set(theirs) == set(ours)
    for key, events in ours.items():
        assert (theirs[key]["n"], theirs[key]["dur"]) == (
            len(events), sum(round(e["dur"] * 1000) for e in events)), key
    assert sorted(r["process"] for r in theirs.values() if r["tid"] == 1) == [
        f"rank {r} ({socket.gethostname()}, local rank {r})" for r in range(4)]


def test_stack_viewer_does_not_take_timeline_json_for_a_stack_dump(held):
    from viewer.discover import scan
    _, timeline, _, _ = held
    [event_dir] = {os.path.dirname(p) for p in glob.glob(str(timeline / JOB / "*" / "timeline.json"))}
    event = scan(timeline / JOB / os.path.basename(event_dir))
    assert "timeline.json" not in {f.path.name for f in event.files}
    assert event.notes == [] or not any("rank numbers" in n for n in event.notes)
