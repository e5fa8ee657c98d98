"""EventStore unit tests: directory naming, upload window, completeness, hang.json rewrites."""

import json
import os

import grpc
import pytest

from diag.collector import events as ev
from diag.collector.config import Config
from diag.collector.events import EventStore, UploadError
from diag.pb import collector_pb2 as pb

NOW = 500.0
UNIX = 1795000000.0


def store(tmp_path, **kw):
    return EventStore(Config(job_id="j", token="t", timeline_path=str(tmp_path), **kw))


def open_event(s, world=4, expected=(0, 1, 2, 3)):
    event_id, path = s.reserve_dir(UNIX)
    return s.open_event(event_id, path, {"world_size": world}, set(expected), NOW)


def dump(event_id, rank, last=False, fmt=pb.StackDump.FORMAT_PYSPY_JSON):
    return pb.StackDump(event_id=event_id, rank=rank, world_size=4, format=fmt, content=b"{}", last=last)


def test_event_ids_are_utc_time_with_a_suffix_when_taken(tmp_path):
    s = store(tmp_path)
    names = [s.reserve_dir(UNIX)[0] for _ in range(3)]
    assert names == ["20261118T110640Z", "20261118T110640Z-1", "20261118T110640Z-2"]
    assert sorted(os.listdir(tmp_path / "j")) == sorted(names)


def test_uploads_are_refused_after_the_window(tmp_path):
    s = store(tmp_path, dump_timeout_s=10)
    event = open_event(s)
    assert s.accept_upload(dump(event.event_id, 1), NOW + 1) == "rank00001-of-00004.py.json"
    with pytest.raises(UploadError) as err:
        s.accept_upload(dump(event.event_id, 2), NOW + ev.MIN_UPLOAD_WINDOW_S + 1)
    assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_dumps_are_in_when_every_rank_sent_its_last_file_or_went_quiet(tmp_path):
    s = store(tmp_path)
    event = open_event(s, expected=(0, 1))
    s.accept_upload(dump(event.event_id, 0, last=True), NOW + 1)
    assert not event.dumps_in(NOW + 1)
    s.accept_upload(dump(event.event_id, 1, last=False), NOW + 2)
    assert not event.dumps_in(NOW + 2)                       # rank 1 may send more
    assert event.dumps_in(NOW + 2 + ev.DUMP_QUIET_S)          # ... but it went quiet
    s.accept_upload(dump(event.event_id, 1, last=True, fmt=pb.StackDump.FORMAT_GDB_TEXT), NOW + 3)
    assert event.dumps_in(NOW + 3)


def test_hang_json_is_rewritten_with_the_dumps_and_leaves_no_temp_files(tmp_path):
    s = store(tmp_path)
    event = open_event(s)
    event.flush(NOW, force=True)
    s.accept_upload(dump(event.event_id, 3, fmt=pb.StackDump.FORMAT_ERROR_TEXT), NOW)
    event.flush(NOW + 0.5)
    doc = json.loads((tmp_path / "j" / event.event_id / "hang.json").read_text())
    assert doc["dumps"] == {"3": ["rank00003-of-00004.error.txt"]} and doc["dumps_missing"] == [0, 1, 2]
    assert sorted(os.listdir(event.path)) == ["hang.json", "rank00003-of-00004.error.txt"]


def test_big_jobs_rewrite_hang_json_at_most_every_few_seconds(tmp_path):
    s = store(tmp_path)
    world = ev.INDENT_UP_TO_WORLD + 1
    event_id, path = s.reserve_dir(UNIX)
    event = s.open_event(event_id, path, {"world_size": world}, {0}, NOW)
    event.flush(NOW, force=True)
    s.accept_upload(pb.StackDump(event_id=event_id, rank=0, world_size=world, format=1, content=b"x"), NOW)
    event.flush(NOW + 0.5)
    hang_json = tmp_path / "j" / event_id / "hang.json"
    assert json.loads(hang_json.read_text())["dumps"] == {}
    event.flush(NOW + ev.BIG_FLUSH_EVERY_S)
    assert json.loads(hang_json.read_text())["dumps"] == {"0": [f"rank00000-of-{world:05d}.py.json"]}


def test_the_biggest_jobs_rewrite_hang_json_once_per_ten_thousand_ranks_a_second(tmp_path):
    """At 100,000 ranks a rewrite costs about a second of the GIL that ingest
    needs while the dumps come in: every 10 s, not every 2."""
    s = store(tmp_path)
    world = 100_000
    event_id, path = s.reserve_dir(UNIX)
    event = s.open_event(event_id, path, {"world_size": world}, {0}, NOW)
    event.flush(NOW, force=True)
    s.accept_upload(pb.StackDump(event_id=event_id, rank=0, world_size=world, format=1, content=b"x"), NOW)
    hang_json = tmp_path / "j" / event_id / "hang.json"
    event.flush(NOW + ev.BIG_FLUSH_EVERY_S)
    assert json.loads(hang_json.read_text())["dumps"] == {}
    event.flush(NOW + world / ev.FLUSH_RANKS_PER_S)
    assert json.loads(hang_json.read_text())["dumps"] == {"0": [f"rank00000-of-{world:06d}.py.json"]}
