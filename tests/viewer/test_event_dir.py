"""stack-viewer on an event directory as the collector writes it (issue 34
items 1-2): the collector's own files pass without a word, the process group
is named as the HANG line names it, and an 80-column terminal gets whole
names and the conclusion."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

CASES = Path(__file__).parent / "data" / "cases"


def viewer_80(event: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "viewer", "--path", str(event), "--out", str(out), "--format",
                           "text"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "80"})


def collector_event(tmp_path: Path) -> Path:
    """gloo4 (real py-spy dumps, hang.json) plus every other file the collector writes there."""
    event = tmp_path / "job" / "20261122T120000Z"
    shutil.copytree(CASES / "gloo4", event)
    (event / "nccl_ras.txt").write_text("Job summary\n===========\n  Nodes  Processes  GPUs\n")
    (event / "faults.json").write_text(json.dumps({"version": 1, "entries": []}))
    (event / "timeline.json").write_text(json.dumps({"traceEvents": []}))
    return event


def test_the_collectors_own_files_are_passed_over_silently(tmp_path):
    proc = viewer_80(collector_event(tmp_path), tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr   # no "not a py-spy dump", no "ranks 0-0 follow the sorted names"
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "Notes:" not in summary and "world size 4; 4 ranks with Python stacks" in summary, summary


def test_80_columns_keep_names_whole_and_say_the_conclusion(tmp_path):
    proc = viewer_80(collector_event(tmp_path), tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("stack-viewer: wrote")[0]
    assert max(len(ln) for ln in table.splitlines()) <= 80, table
    words = {w for ln in table.splitlines() for w in ln.split()}
    for name in ("stall_before_all_reduce@stalled_gloo.py:9", "<module>@stalled_gloo.py:13",
                 "@torch/distributed/distributed_c10d.py:3252"):
        assert name in words, table   # on one line, never cut mid-name
    # the stack clusters are "stack"; "group" is a process group, named as the HANG line names it
    head = next((ln for ln in table.splitlines() if ln.split()[:2] == ["stack", "ranks"]), "")
    assert head and "group" not in head, table
    assert 'all_reduce (group "default" (ranks 0-3), seq 1)' in re.sub(r"\s+", " ", table), table
    # what summary.txt concludes, on the screen too
    assert "Odd ranks out (not at stack #1), innermost Python frame:\n  rank 2: stall_before_all_reduce@" in table
    assert "Culprits (hang.json): rank 2" in table


def test_a_group_name_of_the_wrong_type_is_one_note(tmp_path):
    event = collector_event(tmp_path)
    doc = json.loads((event / "hang.json").read_text())
    doc["ranks"][0]["group"] = 7
    (event / "hang.json").write_text(json.dumps(doc))
    proc = viewer_80(event, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "'ranks' must be a list of {rank, pid, op, comm_id, group, seq" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
