"""The collector's event directories under a shared --timeline-path (issue 33):
another user's link or directory gets nothing and one line says why; a full
disk gets one line per file, naming the directory and the bytes needed.

The other user is real (a subprocess as nobody, 65534); the full disk is a
real 64 KiB tmpfs."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import grpc
import pytest

from diag.collector.config import Config
from diag.collector.events import EventStore, UploadError
from diag.pb import collector_pb2 as pb
from diag.collector.timelines import TimelineGatherer
from tests.otheruser import NOBODY, as_nobody, as_root, shared_timeline
from tests.otheruser import full_tmpfs

NOW, UNIX = 500.0, 1795000000.0


class OneAgent:
    """The registry the gatherer asks: one agent, which never answers."""

    def node_ranks(self):
        return [0]

    def broadcast(self, command):
        return 1



@pytest.fixture
def shared():
    with shared_timeline("event-dir-test-") as dirs:
        yield dirs


def write_everything(timeline: str, expected_upload: bool = False):
    """What a HANG writes: the event dir, hang.json, a rank's stacks, timeline.json."""
    store = EventStore(Config(job_id="job", token="t", timeline_path=timeline))
    event_id, path = store.reserve_dir(UNIX)
    event = store.open_event(event_id, path, {"world_size": 2}, {0, 1}, NOW)
    event.flush(NOW, force=True)
    upload_error = None
    try:
        store.accept_upload(pb.StackDump(event_id=event_id, rank=1, world_size=2, content=b"x" * 3000,
                                         format=pb.StackDump.FORMAT_PYSPY_JSON), NOW)
    except UploadError as exc:
        upload_error = exc
    gatherer = TimelineGatherer("job", OneAgent())
    gatherer.for_event(event_id, path, NOW)
    gatherer.close()        # writes timeline.json now, in this thread
    return event_id, path, upload_error


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@as_root
def test_a_job_dir_planted_as_another_users_link_gets_nothing(shared, caplog):
    timeline, victim = shared
    as_nobody("os.symlink(sys.argv[1], sys.argv[2])", victim, os.path.join(timeline, "job"))
    _, _, upload_error = write_everything(timeline)
    assert os.listdir(victim) == []
    assert upload_error is not None and upload_error.code == grpc.StatusCode.FAILED_PRECONDITION
    said = warnings_of(caplog)
    assert said == [f"refusing to write under {timeline}/job: it is a link owned by uid {NOBODY}; "
                    f"nothing is written there"], said
    assert "Traceback" not in caplog.text


@as_root
def test_a_job_dir_made_by_another_user_gets_nothing(shared, caplog):
    timeline, _ = shared
    job = os.path.join(timeline, "job")
    as_nobody("os.mkdir(sys.argv[1]); os.chmod(sys.argv[1], 0o777)", job)
    write_everything(timeline)
    assert os.listdir(job) == []
    said = warnings_of(caplog)
    assert len(said) == 1 and said[0].startswith(f"refusing to write under {job}: it is owned by uid {NOBODY}"), said


def test_an_event_dir_swapped_for_a_link_after_it_was_made_gets_nothing(shared, caplog):
    """Between the event dir's mkdir and hang.json, the stacks and
    timeline.json, the directory is swapped for another user's link."""
    timeline, victim = shared
    store = EventStore(Config(job_id="job", token="t", timeline_path=timeline))
    event_id, path = store.reserve_dir(UNIX)
    event = store.open_event(event_id, path, {"world_size": 2}, {0, 1}, NOW)
    os.rename(path, path + ".moved")
    os.symlink(victim, path)
    os.lchown(path, NOBODY, NOBODY)
    event.flush(NOW, force=True)
    with pytest.raises(UploadError):
        store.accept_upload(pb.StackDump(event_id=event_id, rank=1, world_size=2, content=b"{}",
                                         format=pb.StackDump.FORMAT_PYSPY_JSON), NOW)
    gatherer = TimelineGatherer("job", OneAgent())
    gatherer.for_event(event_id, path, NOW)
    gatherer.close()
    assert os.listdir(victim) == []
    assert warnings_of(caplog) == [f"refusing to write under {path}: it is a link owned by uid {NOBODY}; "
                                   f"nothing is written there"]


def test_names_squatted_by_links_are_skipped(shared):
    """Links named like the next event ids (the squatting case): the next free name is taken."""
    timeline, victim = shared
    os.mkdir(os.path.join(timeline, "job"))
    os.symlink(victim, os.path.join(timeline, "job", "20261118T110640Z"))
    store = EventStore(Config(job_id="job", token="t", timeline_path=timeline))
    assert store.reserve_dir(UNIX)[0] == "20261118T110640Z-1"
    assert os.listdir(victim) == []


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs, filled up: every write that needs a page fails. The
    job directory is made while there is room: the files inside it are what fail."""
    with full_tmpfs(tmp_path / "full", keep_room_for=("job",)) as mnt:
        yield mnt


def test_a_full_disk_gets_one_line_per_file_naming_the_directory_and_the_bytes(full_disk, caplog):
    event_id, path, upload_error = write_everything(full_disk)
    said = warnings_of(caplog)
    assert upload_error is not None
    names = [re.match(rf"cannot write (\S+) in {re.escape(path)}: no space left \(([\d,]+) bytes needed\)$", s)
             for s in said]
    assert all(names) and [m.group(1) for m in names] == ["hang.json", "rank00001-of-00002.py.json",
                                                          "timeline.json"], said
    assert names[1].group(2) == "3,000"
    assert "Traceback" not in caplog.text and "Errno" not in caplog.text
