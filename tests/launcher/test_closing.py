"""The closing summary's decisions (diag/launcher/closing.py); end to end in
tests/functional/test_closing.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from diag.launcher.closing import EXIT_HANG_KILLED, Closing
from diag.launcher.config import parse_args
from diag.pb import collector_pb2 as pb
from tests.otheruser import as_nobody, as_root, shared_timeline


def closing(tmp_path, *extra):
    lines = []
    config = parse_args(["--timeline-path", str(tmp_path), "--rdzv-id", "j", *extra, "train.py"], env={})
    c = Closing(config, lines.append)
    c.start()
    return c, lines


def kill(event_id):
    return pb.Command(kill_workers=pb.KillWorkers(reason=f"hang {event_id}: --hang-action kill"))


def write_event(tmp_path, event_id, declared, culprits=(2,)):
    path = tmp_path / "j" / event_id
    path.mkdir(parents=True)
    (path / "hang.json").write_text(json.dumps({
        "job_id": "j", "event_id": event_id, "declared_unix": declared, "culprits": list(culprits),
        "verdict": f"HANG: rank 2 not in any collective; stacks in {path}/"}))


def test_a_crash_after_a_kill_that_was_restarted_keeps_the_jobs_own_status(tmp_path):
    c, lines = closing(tmp_path, "--hang-action", "kill")
    c.noting(lambda cmd: None)(kill("ev1"))
    c.failures.update({0: 1, 1: -9})      # rank 0 crashed by itself: not our kill
    assert c.finish(1) == 1
    assert lines[-1] == "exit 1 (the job's own failure, torchrun's summary above)"


def test_the_job_ended_by_our_kill_exits_3_and_events_of_an_earlier_run_are_not_listed(tmp_path):
    c, lines = closing(tmp_path, "--hang-action", "kill")
    write_event(tmp_path, "old", time.time() - 3600)
    write_event(tmp_path, "new", time.time())
    c.note(pb.Command(dump_stacks=pb.DumpStacks(event_id="new")))
    c.note(kill("new"))
    c.failures.update({0: -9, 1: -9, 2: -9})
    assert c.finish(1) == EXIT_HANG_KILLED
    assert lines[0] == "1 hang in this run"
    assert lines[1].startswith("HANG event new: rank 2 not in any collective; culprit rank(s) 2; stacks in ")
    assert "old" not in "\n".join(lines)
    assert lines[-1] == "exit 3 (stopped by xpu-diag because of a hang)"


def test_an_event_this_node_cannot_read_is_still_listed(tmp_path):
    c, lines = closing(tmp_path)
    c.note(pb.Command(dump_stacks=pb.DumpStacks(event_id="elsewhere")))
    assert c.finish(0) == 0
    assert lines[1] == (f"HANG event elsewhere: its verdict is in the collector's log (node 0); stacks in "
                        f"{os.path.join(tmp_path, 'j', 'elsewhere')}/ (stack-viewer --path "
                        f"{os.path.join(tmp_path, 'j', 'elsewhere')})")


def test_nothing_is_said_when_no_worker_started(tmp_path):
    lines = []
    c = Closing(parse_args(["--timeline-path", str(tmp_path), "train.py"], env={}), lines.append)
    assert c.finish(2) == 2 and lines == []


@as_root
def test_another_users_link_at_the_jobs_name_lends_the_summary_no_event():
    """Issue 33: under a 1777 timeline, nobody's link ``<timeline>/j`` to a
    directory with a hang.json of its own is refused with one line; the
    summary lists no event from it."""
    with shared_timeline("closing-links-test-") as (timeline, fake):
        write_event(Path(fake), "planted", time.time())
        as_nobody("os.symlink(sys.argv[1], sys.argv[2])", os.path.join(fake, "j"), os.path.join(timeline, "j"))
        c, lines = closing(timeline)
        assert c.finish(0) == 0
        assert lines == [f"refusing to read under {timeline}/j: it is a link owned by uid 65534; nothing there is "
                         f"read", "no hang or slow rank seen", "exit 0 (the job succeeded)"]
