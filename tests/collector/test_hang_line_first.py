"""The declaring tick says the HANG line before hang.json's per-rank rows
exist (watchdog.py, docs/collector.md "Scale"): the line, its GPU clause and
faults.json come out the same from a document without rows as from one
with them, and the rows built after are the ones a whole document has."""

import json
import os

from diag.collector import gpus, verdict
from diag.hang.api import Limits
from diag.hang.decide import analyse
from diag.collector.state import JobState
from diag.gpu import wire
from diag.gpu.api import GpuEvent, GpuHealth, GpuIdentity, GpuSample
from tests.collector.fakes import ALL_REDUCE, node_report, rank_progress

T0 = 1000.0


def _snapshot(fallen: int):
    """4 ranks on 2 nodes, all in all_reduce at seq 4 for 12 s (every rank
    waits: no culprit, no suspect); rank ``fallen``'s GPU reported XID 79."""
    progress = []
    for r in range(4):
        p = rank_progress(r, 4, op=ALL_REDUCE, age_s=12.0, seq=4, started=4, completed=3)
        events = (GpuEvent(T0 - 5, "xid", 79, "GPU fell off the bus", True),) if r == fallen else ()
        health = GpuHealth(GpuIdentity(f"0000:4{r}:00.0", f"GPU-{r:08d}-0000-0000-0000-000000000000", r % 2,
                                       r % 2, "NVIDIA H100 80GB HBM3"), GpuSample(T0 - 1), T0 - 1, events, "")
        p.gpu.CopyFrom(wire.health_msg(health))
        progress.append(p)
    state = JobState()
    state.ingest(node_report(0, progress[:2]), T0)
    state.ingest(node_report(1, progress[2:]), T0)
    return state.snapshot(T0)


def _document(snap, path, rows):
    findings = analyse(snap, Limits(10.0, 60.0))
    doc = verdict.hang_document(findings, snap, job_id="j", event_id="e", event_dir=path, declared_unix=0.0,
                                timeout_s=10.0, rows=rows)
    gpus.annotate_hang(doc, snap, path)
    return findings, doc


def test_the_line_and_faults_json_need_no_rows_and_the_rows_come_after(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_RAS_ADDR", "127.0.0.1:9")   # nothing listens: the RAS ask ends at once
    snap = _snapshot(fallen=2)
    whole, first = tmp_path / "whole", tmp_path / "first"
    whole.mkdir()
    first.mkdir()
    _, full = _document(snap, str(whole), rows=True)
    findings, early = _document(snap, str(first), rows=False)
    assert early["ranks"] is None and early["suspects"] is None and early["never_entered"] is None
    # the GPU clause comes from the snapshot's ranks when no rank is blamed
    assert "rank 2's gpu 0000:42:00.0" in early["verdict"] and "XID 79" in early["verdict"]
    assert early["verdict"] == full["verdict"].replace(str(whole), str(first))
    assert early["gpu_events"] == full["gpu_events"] and len(early["gpu_events"]) == 1
    with open(os.path.join(whole, "faults.json")) as a, open(os.path.join(first, "faults.json")) as b:
        fa, fb = json.load(a), json.load(b)
    assert fa["faulty"] == fb["faulty"] and [e["node_rank"] for e in fb["faulty"]] == [1]
    # what the watchdog adds after the line: the same rows as a whole document's
    rows = verdict.rank_rows(findings, snap)
    gpus.annotate_rows(rows, snap)
    assert rows == full["ranks"] and [r["gpu"]["pci_bus_id"] for r in rows] == [f"0000:4{r}:00.0" for r in range(4)]


def test_ranks_that_never_entered_are_in_the_line_and_their_rows_come_after(tmp_path):
    """Ranks 2-7 a seq behind, rank 1 not in any collective, rank 0 hung:
    the line from a document without its per-rank sections is the whole
    document's, and the sections built after it are the whole one's."""
    progress = [rank_progress(0, 8, op=ALL_REDUCE, age_s=12.0, seq=5, started=5, completed=4),
                rank_progress(1, 8, started=5, completed=5, idle_s=3.0)]
    progress += [rank_progress(r, 8, started=4, completed=4, idle_s=1.0, last_op="broadcast") for r in range(2, 8)]
    state = JobState()
    state.ingest(node_report(0, progress[:4]), T0)
    state.ingest(node_report(1, progress[4:]), T0)
    snap = state.snapshot(T0)
    findings, early = _document(snap, str(tmp_path), rows=False)
    _, full = _document(snap, str(tmp_path), rows=True)
    assert early["verdict"] == full["verdict"]
    assert ('ranks 2-7 not in any collective (at seq 4 on group "default")' in early["verdict"]
            and "rank 1 not in any collective" in early["verdict"])
    assert all(early[k] is None for k in verdict.RANK_SECTIONS)
    sections = verdict.rank_sections(findings)
    assert sections == {k: full[k] for k in verdict.RANK_SECTIONS}
    assert [n["rank"] for n in sections["never_entered"]] == list(range(2, 8))
    assert [(s["rank"], s["last_op"]) for s in sections["suspects"]] == [(1, "all_reduce")] + [
        (r, "broadcast") for r in range(2, 8)]


def test_the_declaring_thread_keeps_the_gil_longer_only_while_ingest_holds():
    import sys
    from diag.collector.watchdog import KEEP_GIL_S, gil_kept
    before = sys.getswitchinterval()
    with gil_kept(False):
        assert sys.getswitchinterval() == before
    try:
        with gil_kept(True):
            assert abs(sys.getswitchinterval() - KEEP_GIL_S) < 1e-6 and KEEP_GIL_S > before   # held in us
            raise RuntimeError("a rule failed")
    except RuntimeError:
        pass
    assert sys.getswitchinterval() == before   # given back even when the judgement raised
