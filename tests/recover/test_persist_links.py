"""The agent's persisted copies under a shared --timeline-path (the default
``<timeline>/<job>/ckpt``) follow no other user's link (issue 33): the
persist fails with one line, the victim directory gets nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from diag.recover import api, persist
from diag.recover.persist import persist_newest
from tests.recover import helpers

NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second local user")
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_job_dir_planted_as_another_users_link_gets_no_copy(tmp_path):
    node = str(tmp_path / "node")
    os.makedirs(node)
    code, _, err = helpers.big_run(1, 1, node)
    assert code == 0, err
    base = tempfile.mkdtemp(prefix="persist-links-test-")
    try:
        os.chmod(base, 0o755)
        timeline, victim = os.path.join(base, "timeline"), os.path.join(base, "victim")
        os.mkdir(timeline)
        os.chmod(timeline, 0o1777)
        os.mkdir(victim, 0o700)
        plant = f"import os, sys; os.setgid({NOBODY}); os.setuid({NOBODY}); os.symlink(sys.argv[1], sys.argv[2])"
        out = subprocess.run([sys.executable, "-c", plant, victim, os.path.join(timeline, "job")],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        result = persist_newest(node, os.path.join(timeline, "job", "ckpt"))
        assert [r.outcome for r in result.ranks] == ["failed"], result.summary()
        assert (f"refusing to write under {timeline}/job: it is a link owned by uid {NOBODY}"
                in result.ranks[0].reason), result.summary()
        assert os.listdir(victim) == []
    finally:
        shutil.rmtree(base)


def _planted(base: str) -> tuple[str, str]:
    """A 1777 timeline whose ``job`` nobody made a link to root's victim
    directory, which holds two persisted copies of rank 0 (steps 1 and 2)."""
    os.chmod(base, 0o755)
    timeline, victim = os.path.join(base, "timeline"), os.path.join(base, "victim")
    os.mkdir(timeline)
    os.chmod(timeline, 0o1777)
    os.mkdir(victim, 0o700)
    for step in (1, 2):
        os.makedirs(persist.copy_dir(os.path.join(victim, "ckpt"), step, 0))
    plant = f"import os, sys; os.setgid({NOBODY}); os.setuid({NOBODY}); os.symlink(sys.argv[1], sys.argv[2])"
    out = subprocess.run([sys.executable, "-c", plant, victim, os.path.join(timeline, "job")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return timeline, victim


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second local user")
def test_restore_lists_no_copy_through_another_users_link():
    base = tempfile.mkdtemp(prefix="persist-links-test-")
    try:
        timeline, victim = _planted(base)
        said: list[str] = []
        assert persist.copies(os.path.join(timeline, "job", "ckpt"), 0, say=said.append) == []
        assert said == [f"refusing to read under {timeline}/job: it is a link owned by uid {NOBODY}; "
                        f"nothing there is read"]
        with pytest.raises(api.CorruptSnapshot, match=f"refusing to read under {timeline}/job: it is a link"):
            persist.read_manifest(persist.copy_dir(os.path.join(timeline, "job", "ckpt"), 2, 0))
    finally:
        shutil.rmtree(base)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second local user")
def test_prune_removes_nothing_through_another_users_link():
    base = tempfile.mkdtemp(prefix="persist-links-test-")
    try:
        timeline, victim = _planted(base)
        said: list[str] = []
        persist.prune(os.path.join(timeline, "job", "ckpt"), 0, keep=1, say=said.append)
        assert sorted(os.listdir(os.path.join(victim, "ckpt"))) == ["step-00000001", "step-00000002"]
        assert said == [f"refusing to read under {timeline}/job: it is a link owned by uid {NOBODY}; "
                        f"nothing there is read"]
    finally:
        shutil.rmtree(base)
