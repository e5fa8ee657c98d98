"""Writes under a shared (1777) directory follow no other user's link and go
into no other user's directory (diag/common/safe_dirs.py, issue 33). The
other user is a real one: a subprocess as nobody (65534)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from diag.common import safe_dirs
from tests.otheruser import NOBODY, as_nobody, as_root, shared_timeline




@pytest.fixture
def shared():
    with shared_timeline("safe-dirs-test-") as dirs:
        yield dirs


@as_root
def test_a_link_planted_by_another_user_is_refused_in_one_line(shared):
    timeline, victim = shared
    as_nobody("os.symlink(sys.argv[1], sys.argv[2])", victim, os.path.join(timeline, "job"))
    with pytest.raises(safe_dirs.Unwritable) as err:
        safe_dirs.write_file(os.path.join(timeline, "job", "ev", "hang.json"), b"{}", create_dirs=True)
    assert os.listdir(victim) == []
    line = str(err.value)
    assert "\n" not in line and line == (f"refusing to write under {timeline}/job: it is a link owned by uid "
                                         f"{NOBODY}; nothing is written there")


@as_root
def test_another_users_directory_is_refused(shared):
    timeline, _ = shared
    as_nobody("os.mkdir(sys.argv[1], 0o777); os.chmod(sys.argv[1], 0o777)", os.path.join(timeline, "job"))
    with pytest.raises(safe_dirs.Unwritable, match=rf"under {timeline}/job: it is owned by uid {NOBODY}"):
        safe_dirs.write_file(os.path.join(timeline, "job", "hang.json"), b"{}", create_dirs=True)
    assert os.listdir(os.path.join(timeline, "job")) == []


def test_a_directory_swapped_for_a_link_after_it_was_opened_gets_nothing(tmp_path):
    """The swap lands between the directory's open and the file's write: the
    file goes into the directory that was opened and checked, never into
    what the name points at now."""
    event, victim, moved = tmp_path / "event", tmp_path / "victim", tmp_path / "moved"
    event.mkdir()
    victim.mkdir()
    fd = safe_dirs.open_dir(event)
    try:
        os.rename(event, moved)
        os.symlink(victim, event)
        safe_dirs.write_in(fd, str(event), "hang.json", b"{}")
    finally:
        os.close(fd)
    assert os.listdir(victim) == [] and os.listdir(moved) == ["hang.json"]


def test_a_link_at_the_files_name_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_bytes(b"precious")
    os.symlink(victim, tmp_path / "hang.json")
    safe_dirs.write_file(tmp_path / "hang.json", b"{}")
    assert victim.read_bytes() == b"precious" and (tmp_path / "hang.json").read_bytes() == b"{}"
    assert not (tmp_path / "hang.json").is_symlink()


def test_own_links_on_the_way_are_followed_and_a_world_writable_dir_needs_the_sticky_bit(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink("real", tmp_path / "mine")           # the user's own link, as /root/timeline -> /data may be
    safe_dirs.write_file(tmp_path / "mine" / "a" / "x.json", b"1", create_dirs=True)
    assert (real / "a" / "x.json").read_bytes() == b"1"
    os.chmod(real, 0o777)                            # anyone may rename what is in it
    with pytest.raises(safe_dirs.Unwritable, match=r"others may write in it \(mode 777\) and it is not sticky"):
        safe_dirs.write_file(tmp_path / "mine" / "a" / "y.json", b"2")
    os.chmod(real, 0o1777)
    safe_dirs.write_file(tmp_path / "mine" / "a" / "y.json", b"2")


def test_say_once_says_a_line_once():
    said = []
    exc = safe_dirs.Unwritable(28, "cannot write hang.json in /x: no space left (10 bytes needed)")
    for _ in range(3):
        safe_dirs.say_once(said.append, exc)
    assert said == [str(exc)]


def test_reads_follow_own_links_and_read_missing_as_none(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "faults.json").write_bytes(b"{}")
    os.symlink("real", tmp_path / "mine")
    os.symlink("faults.json", tmp_path / "real" / "alias.json")
    assert safe_dirs.read_file(tmp_path / "mine" / "faults.json") == b"{}"
    assert safe_dirs.read_file(tmp_path / "mine" / "alias.json") == b"{}"
    assert safe_dirs.read_file(tmp_path / "mine" / "nope.json") is None
    assert safe_dirs.read_file(tmp_path / "nope" / "faults.json") is None


def test_a_fifo_at_the_name_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "faults.json")
    with pytest.raises(safe_dirs.Unreadable, match=r"faults.json: it is not a regular file"):
        safe_dirs.read_file(tmp_path / "faults.json")


@as_root
def test_a_file_or_link_of_another_user_is_not_read(shared):
    timeline, victim = shared
    with open(os.path.join(victim, "secret"), "w") as f:
        f.write("precious")
    as_nobody("f = open(sys.argv[1], 'w'); f.write('theirs'); f.close(); os.symlink(sys.argv[2], sys.argv[3])",
              os.path.join(timeline, "planted.json"), os.path.join(victim, "secret"),
              os.path.join(timeline, "link.json"))
    with pytest.raises(safe_dirs.Unreadable) as err:
        safe_dirs.read_file(os.path.join(timeline, "planted.json"))
    assert str(err.value) == (f"refusing to read under {timeline}/planted.json: it is owned by uid {NOBODY}, "
                              f"not by this user (uid 0); nothing there is read")
    with pytest.raises(safe_dirs.Unreadable, match=f"under {timeline}/link.json: it is a link owned by uid {NOBODY}"):
        safe_dirs.read_file(os.path.join(timeline, "link.json"))
