"""Reads under a shared --timeline-path follow no other user's link (issue 33):
the faults.json that --hang-action recover reads next to hang.json is read
through safe_dirs; another user's planted link or file is refused with one
line and read as no file. The other user is real: a subprocess as nobody."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

import pytest

from diag.collector.watchdog import blamed_nodes
from tests.otheruser import NOBODY, as_nobody, as_root




@pytest.fixture
def shared():
    """A root-owned 1777 timeline and root's own victim directory holding an
    event directory whose faults.json blames node 1."""
    base = tempfile.mkdtemp(prefix="timeline-reads-test-")
    os.chmod(base, 0o755)
    timeline, victim = os.path.join(base, "timeline"), os.path.join(base, "victim")
    os.mkdir(timeline)
    os.chmod(timeline, 0o1777)
    os.makedirs(os.path.join(victim, "ev"), 0o700)
    with open(os.path.join(victim, "ev", "faults.json"), "w") as f:
        json.dump({"version": 1, "tool": "test", "created_unix": time.time(),
                   "faulty": [{"node": "n1", "reason": "planted", "node_rank": 1}]}, f)
    yield timeline, victim
    shutil.rmtree(base)


SNAP = SimpleNamespace(agents={0: SimpleNamespace(hostname="vm"), 1: SimpleNamespace(hostname="vm")})


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_victims_fault_list_is_what_would_be_read(shared):
    """The planted target is a valid fault list: read directly, it blames node 1."""
    _, victim = shared
    assert blamed_nodes(os.path.join(victim, "ev"), SNAP, [0, 1]) == [1]


@as_root
def test_a_job_dir_planted_as_another_users_link_is_not_read(shared, caplog):
    timeline, victim = shared
    as_nobody("os.symlink(sys.argv[1], sys.argv[2])", victim, os.path.join(timeline, "job"))
    with caplog.at_level(logging.WARNING):
        assert blamed_nodes(os.path.join(timeline, "job", "ev"), SNAP, [0, 1]) == []
    assert warnings_of(caplog) == [f"not leaving any node out: refusing to read under {timeline}/job: it is a "
                                   f"link owned by uid {NOBODY}; nothing there is read"]


@as_root
def test_a_fault_list_planted_as_another_users_link_is_not_read(shared, caplog):
    """An event directory that others may write in (sticky, as a 1777 one
    copied by hand would be): the link at faults.json is not followed."""
    timeline, victim = shared
    event = os.path.join(timeline, "ev")
    os.mkdir(event)
    os.chmod(event, 0o1777)
    as_nobody("os.symlink(sys.argv[1], sys.argv[2])", os.path.join(victim, "ev", "faults.json"),
              os.path.join(event, "faults.json"))
    with caplog.at_level(logging.WARNING):
        assert blamed_nodes(event, SNAP, [0, 1]) == []
    assert warnings_of(caplog) == [f"not leaving any node out: refusing to read under {event}/faults.json: it is "
                                   f"a link owned by uid {NOBODY}; nothing there is read"]


@as_root
def test_a_fault_list_written_by_another_user_is_not_read(shared, caplog):
    timeline, victim = shared
    event = os.path.join(timeline, "ev")
    os.mkdir(event)
    os.chmod(event, 0o1777)
    with open(os.path.join(victim, "ev", "faults.json")) as f:
        text = f.read()
    as_nobody("f = open(sys.argv[2], 'w'); f.write(sys.argv[1]); f.close()", text, os.path.join(event, "faults.json"))
    with caplog.at_level(logging.WARNING):
        assert blamed_nodes(event, SNAP, [0, 1]) == []
    assert warnings_of(caplog) == [f"not leaving any node out: refusing to read under {event}/faults.json: it is "
                                   f"owned by uid {NOBODY}, not by this user (uid 0); nothing there is read"]
