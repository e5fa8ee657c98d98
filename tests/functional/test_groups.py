"""Process groups by the names users gave them, on gloo (the tracer alone):
through the real xpu_timer_launch, two named subgroups, one hang; a p2p hang
names its group as a collective hang does.

The three hung jobs are independent and mostly wait (the hang timeout, the
dumps), so one module fixture starts them together; each test judges its own.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from tests.functional.launch import SCRIPTS, module_launches  # noqa: F401 (fixture)
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(240)


P2P_OPS = ["send", "batch_isend_irecv"]


@pytest.fixture(scope="module")
def jobs(module_launches, tmp_path_factory):
    """name -> (job, its timeline directory), all started at once."""
    started = {}
    tmp_path = tmp_path_factory.mktemp("subgroups")
    started["subgroups"] = (module_launches(
        ["--nproc-per-node", "2", "--hang-timeout", "4s", "--timeline-path", str(tmp_path),
         os.path.join(SCRIPTS, "subgroups.py")]), tmp_path)
    for op in P2P_OPS:
        # Rank 1 never posts its recv, so rank 0 hangs in its send.
        tmp_path = tmp_path_factory.mktemp(op)
        started[op] = (module_launches(
            ["--nproc-per-node", "2", "--hang-timeout", "3s", "--timeline-path", str(tmp_path),
             os.path.join(SCRIPTS, "p2p_hang.py"), op], env={"XPU_TIMER_DUMP_TOOLS": "py-spy"}), tmp_path)
    return started


def test_hang_on_a_named_subgroup_names_it_and_its_ranks(jobs):
    job, tmp_path = jobs["subgroups"]
    try:
        hit = job.wait_line(r"HANG: ", 150)
        assert hit, job.output()
        line = hit[1][hit[1].index("HANG: "):]
        assert line.startswith('HANG: rank 0 in all_reduce (group "dp" (ranks 0-1), seq 4) for '), line
        assert 'rank 1 not in any collective (at seq 3 on group "dp")' in line, line
        [path] = wait_for(lambda: glob.glob(os.path.join(str(tmp_path), "*", "*", "hang.json")), "hang.json")
        with open(path) as f:
            report = json.load(f)
        assert report["culprits"] == [1] and report["hung_ops"][0]["group"] == "dp"
        assert report["groups"] == [{"comm_id": report["hung_ops"][0]["comm_id"], "name": "dp", "ranks": "0-1"}]
        def complete():   # the rank rows are built after the line, the stacks arrive after them
            with open(path) as f:
                doc = json.load(f)
            return doc if doc["ranks"] and doc["never_entered"] and len(doc["dumps"]) == 2 else None
        report = wait_for(complete, "hang.json with its rank rows and both ranks' stacks", timeout=60)
        # one name everywhere users see the group: the rank rows and never_entered too (issue 34 item 1)
        assert report["ranks"][0]["group"] == "dp" and report["ranks"][1]["group"] is None, report["ranks"]
        assert [(n["rank"], n["group"]) for n in report["never_entered"]] == [(1, "dp")]
        # stack-viewer on the collector's own event directory, at 80 columns: the group by
        # that name, no note about the collector's files, the conclusion on screen (item 2)
        event = os.path.dirname(path)
        view = subprocess.run([sys.executable, "-m", "viewer", "--path", event, "--out", str(tmp_path / "out"),
                               "--format", "text"], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "COLUMNS": "80"})
        assert view.returncode == 0, view.stderr
        assert 'all_reduce (group "dp" (ranks 0-1), seq 4)' in view.stdout, view.stdout
        assert "Odd ranks out" in view.stdout and "Culprits (hang.json): rank 1" in view.stdout, view.stdout
        assert [ln for ln in view.stderr.splitlines() if not ln.startswith("stack-viewer: stacks.dot")] == [], \
            view.stderr
    finally:
        job.kill()


@pytest.mark.parametrize("op", P2P_OPS)
def test_a_p2p_hang_names_its_group_as_a_collective_hang_does(jobs, op):
    job, tmp_path = jobs[op]
    try:
        hit = job.wait_line(r"HANG: ", 90)
        assert hit, job.output()
        line = hit[1][hit[1].index("HANG: "):]
        assert line.startswith(f'HANG: rank 0 in {op} (group "default" (ranks 0-1), p2p) for '), line
        assert "rank 1 not in any collective" in line, line
        [path] = wait_for(lambda: glob.glob(os.path.join(str(tmp_path), "*", "*", "hang.json")), "hang.json")
        with open(path) as f:
            report = json.load(f)
        assert report["culprits"] == [1] and report["hung_ops"][0]["group"] == "default"
        assert report["groups"] == [{"comm_id": 0, "name": "default", "ranks": "0-1"}]
    finally:
        job.kill()
