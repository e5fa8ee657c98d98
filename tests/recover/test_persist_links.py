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
