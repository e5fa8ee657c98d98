"""The agent's persisted copies under a shared --timeline-path (the default
``<timeline>/<job>/ckpt``) follow no other user's link (issue 33): the
persist fails with one line, the victim directory gets nothing."""

from __future__ import annotations

import contextlib
import os

import pytest

from diag.recover import api, persist
from diag.recover.persist import persist_newest
from tests.otheruser import NOBODY, as_nobody, as_root, shared_timeline
from tests.recover import helpers


@contextlib.contextmanager
def _planted(steps=()):
    """A 1777 timeline whose ``job`` nobody made a link to root's victim
    directory, which holds persisted copies of rank 0 at ``steps``."""
    with shared_timeline("persist-links-test-") as (timeline, victim):
        for step in steps:
            os.makedirs(persist.copy_dir(os.path.join(victim, "ckpt"), step, 0))
        as_nobody("os.symlink(sys.argv[1], sys.argv[2])", victim, os.path.join(timeline, "job"))
        yield timeline, victim


@as_root
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_job_dir_planted_as_another_users_link_gets_no_copy(tmp_path):
    node = str(tmp_path / "node")
    os.makedirs(node)
    code, _, err = helpers.big_run(1, 1, node)
    assert code == 0, err
    with _planted() as (timeline, victim):
        result = persist_newest(node, os.path.join(timeline, "job", "ckpt"))
        assert [r.outcome for r in result.ranks] == ["failed"], result.summary()
        assert (f"refusing to write under {timeline}/job: it is a link owned by uid {NOBODY}"
                in result.ranks[0].reason), result.summary()
        assert os.listdir(victim) == []


@as_root
def test_restore_lists_no_copy_through_another_users_link():
    with _planted((1, 2)) as (timeline, victim):
        said: list[str] = []
        assert persist.copies(os.path.join(timeline, "job", "ckpt"), 0, say=said.append) == []
        assert said == [f"refusing to read under {timeline}/job: it is a link owned by uid {NOBODY}; "
                        f"nothing there is read"]
        with pytest.raises(api.CorruptSnapshot, match=f"refusing to read under {timeline}/job: it is a link"):
            persist.read_manifest(persist.copy_dir(os.path.join(timeline, "job", "ckpt"), 2, 0))


@as_root
def test_prune_removes_nothing_through_another_users_link():
    with _planted((1, 2)) as (timeline, victim):
        said: list[str] = []
        persist.prune(os.path.join(timeline, "job", "ckpt"), [0], keep=1, say=said.append)
        assert sorted(os.listdir(os.path.join(victim, "ckpt"))) == ["step-00000001", "step-00000002"]
        assert said == [f"refusing to read under {timeline}/job: it is a link owned by uid {NOBODY}; "
                        f"nothing there is read"]
