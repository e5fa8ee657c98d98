"""The collector's HANG verdict with link data (docs/link.md): named only where
every member waits in the same collective at the same seq; both nodes go to
faults.json; without link data the line is as before. Pure rules with a fake
clock, as tests/collector/test_divergence.py."""

import json
import os

import pytest

from diag.collector import gpus, verdict
from diag.hang.api import Limits
from diag.hang.decide import analyse
from diag.collector.state import JobState
from diag.link import wire
from diag.pb import collector_pb2 as pb
from tests.collector.fakes import ALL_REDUCE, node_report, rank_progress
from tests.link.test_analysis import stuck_ring

T0 = 1000.0
WAITS = "no rank is behind: every reporting rank waits"


@pytest.fixture(autouse=True)
def no_ras(monkeypatch):
    monkeypatch.setenv("NCCL_RAS_ADDR", "127.0.0.1:9")   # nothing listens: the RAS ask ends at once


def judge(seqs, links=None, tmp_path=None):
    """4 ranks on nodes n0 (0-1) and n1 (2-3), in all_reduce at ``seqs[r]`` for 12 s."""
    progress = []
    for r, seq in enumerate(seqs):
        p = rank_progress(r, 4, op=ALL_REDUCE if seq else None, age_s=12.0, seq=seq or 0,
                          started=seq or 3, completed=(seq or 4) - 1)
        if links:
            p.links.extend(wire.entry_msg(e) for e in links.get(r, []))
        progress.append(p)
    state = JobState()
    state.ingest(node_report(0, progress[:2]), T0)
    state.ingest(node_report(1, progress[2:]), T0)
    snap = state.snapshot(T0)
    findings = analyse(snap, Limits(10.0, 60.0))
    path = str(tmp_path) if tmp_path else "/ev"
    doc = verdict.hang_document(findings, snap, job_id="j", event_id="e", event_dir=path, declared_unix=0.0,
                                timeout_s=10.0)
    if tmp_path:
        gpus.annotate_hang(doc, snap, path)
    return doc


def test_every_rank_waiting_at_one_seq_names_the_link_and_lists_both_nodes(tmp_path):
    doc = judge([4, 4, 4, 4], stuck_ring(4, 1, src=1, step=3), tmp_path)
    line = doc["verdict"]
    assert line.startswith("HANG: ranks 0-3 in all_reduce")
    assert (f"{WAITS}; link rank 1 -> rank 2 (node n0 -> node n1), channel 1, stuck at step 3; "
            "every other channel advanced; node(s) n0, n1 on the fault list ") in line
    [link] = doc["link"]["links"]
    assert (link["src_rank"], link["dst_rank"], link["stuck_step"], link["channels"]) == (1, 2, 3, [1])
    with open(os.path.join(tmp_path, "faults.json")) as f:
        faults = json.load(f)
    assert {(e["node"], e["node_rank"]) for e in faults["faulty"]} == {("n0", 0), ("n1", 1)}
    assert {r["rule"] for r in faults["records"]} == {"nccl-link"}


def test_without_link_data_the_line_is_as_before(tmp_path):
    doc = judge([4, 4, 4, 4], None, tmp_path)
    assert doc["verdict"].endswith(f"{WAITS}; stacks in {tmp_path}/") and doc["link"] is None
    assert not os.path.exists(os.path.join(tmp_path, "faults.json"))


def test_ranks_at_different_seqs_make_no_link_claim():
    # Rank 2 waits in seq 3 and never started seq 4: it is behind, not a link.
    doc = judge([4, 4, 3, 4], stuck_ring(4, 1, src=1, step=3))
    assert "rank 2 never entered all_reduce" in doc["verdict"]
    assert "link rank" not in doc["verdict"] and doc["link"] is None


def test_a_rank_outside_any_collective_makes_no_link_claim():
    doc = judge([4, 4, None, 4], stuck_ring(4, 1, src=1, step=3))
    assert "rank 2 not in any collective" in doc["verdict"]
    assert "link rank" not in doc["verdict"] and doc["link"] is None


def test_starved_counters_alone_leave_the_line_as_before():
    starved = stuck_ring(4, 1, src=1, step=3, sender_ahead=0, sender_state=8)
    doc = judge([4, 4, 4, 4], starved)
    assert doc["verdict"].endswith(f"{WAITS}; stacks in /ev/") and doc["link"] is None


def test_the_proto_carries_every_counter():
    [e] = stuck_ring(2, 3, src=0, step=9)[0][:1]
    msg = pb.RankProgress.FromString(pb.RankProgress(links=[wire.entry_msg(e)]).SerializeToString())
    assert wire.entry_of(msg.links[0]) == e
