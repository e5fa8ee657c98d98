import subprocess
import sys
from pathlib import Path

import pytest

from diag.netcheck.report import slurm_hostlist, taint_commands

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("names, text", [
    (["node3", "node7"], "node[3,7]"),
    (["node7", "node3", "node4", "node5"], "node[3-5,7]"),
    (["node3"], "node3"),
    (["gpu01", "gpu02", "gpu10"], "gpu[01-02,10]"),
    (["a1", "b2", "b3", "login"], "a1,b[2-3],login"),
    ([], ""),
])
def test_slurm_hostlist(names, text):
    assert slurm_hostlist(names) == text


def test_taint_commands_are_quoted_and_carry_the_reason():
    lines = taint_commands({"n1": "busbw low", "we'ird": "x"}, "xpu-diag/faulty")
    assert lines[0] == "# n1: busbw low"
    assert lines[1] == "kubectl taint nodes n1 xpu-diag/faulty=netcheck:NoSchedule --overwrite"
    assert lines[3].startswith("kubectl taint nodes 'we'\"'\"'ird' ")


def test_cli_usage_error_is_one_line_exit_2():
    res = subprocess.run([sys.executable, "-m", "diag.netcheck.cli", "--nnodes", "2", "--size", "lots"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["netcheck: --size: 'lots' is not a size; use e.g. 4096, 64M or 1G"]


def test_cli_unreachable_store_is_one_line_exit_3():
    # Port 9 on loopback (discard) is closed here; the join timeout keeps the wait short.
    res = subprocess.run([sys.executable, "-m", "diag.netcheck.cli", "--nnodes", "2", "--node-rank", "1",
                          "--master-addr", "127.0.0.1", "--master-port", "9", "--join-timeout", "2s"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 3, res.stderr
    lines = [l for l in res.stderr.splitlines() if l.startswith("netcheck:")]
    assert len(lines) == 1 and "cannot reach the store at 127.0.0.1:9" in lines[0]


def test_table_lists_failures_first_with_rule_and_faulty_hostlist():
    import io

    from rich.console import Console

    from diag import faultlist
    from diag.netcheck.api import Measurement
    from diag.netcheck.report import render_table
    recs = [Measurement("n1", "all_reduce.busbw", 40.0, "GB/s", link="n1<->n2", expected=41.0),
            Measurement("n3", "all_reduce.busbw", 2.0, "GB/s", link="n3<->n4", expected=41.0, threshold=20.5,
                        verdict="fail", rule="relative-ratio", reason="busbw 2 GB/s < 0.5 x fleet median 41"),
            Measurement("n3", "nvml.NVLINK_DOWN", 0, "", gpu=2, link="nvlink5", verdict="fail", rule="nvml-health",
                        reason="NVLink 5 is inactive")]
    doc = faultlist.to_document({"n3": "slow"}, [r.to_dict() for r in recs])
    buf = io.StringIO()
    render_table(doc, Console(file=buf, width=200), verbose=True)
    lines = buf.getvalue().splitlines()
    body = [l for l in lines if l.startswith("│")]
    assert "n3" in body[0] and "fail" in body[0] and "n1" in body[-1]
    assert any("relative-ratio: busbw 2 GB/s" in l for l in body)
    assert any("gpu2 nvlink5" in l for l in body)
    assert lines[-1] == "faulty: n3"


def test_default_table_is_one_row_per_node_within_120_columns():
    import io

    from rich.console import Console

    from diag import faultlist
    from diag.netcheck.api import Measurement
    from diag.netcheck.report import render_table
    recs = []
    for k in range(5):
        slow = k == 3
        recs.append(Measurement(f"vm#{k}", "node", None, "", verdict="fail" if slow else "pass",
                                reason=("all_reduce busbw 0.004 GB/s < 0.2 x fleet median 0.9 GB/s; partner vm#0 is "
                                        "healthy; and a long tail that must not widen the table " * 3)
                                if slow else "passed with a healthy partner",
                                extra={"node_rank": k, "addr": f"10.200.1.{k + 1}"}))
        for metric, value in (("all_reduce.busbw", 0.004 if slow else 0.9), ("sendrecv.busbw", 0.8)):
            recs.append(Measurement(f"vm#{k}", metric, value, "GB/s", link=f"vm#{k}<->vm#0", expected=0.85))
    recs.append(Measurement("*", "rounds", 2.0, "", verdict="info"))
    doc = faultlist.to_document([faultlist.FaultEntry("vm#3", "slow", "vm", 3, "10.200.1.4")],
                                [r.to_dict() for r in recs])
    buf = io.StringIO()
    render_table(doc, Console(file=buf, width=180))
    lines = buf.getvalue().splitlines()
    body = [l for l in lines if l.startswith("│")]
    assert len(body) == 5 and max(map(len, lines)) <= 120
    assert body[0].split("│")[1].strip() == "vm#3" and "10.200.1.4" in body[0] and "fail" in body[0]
    assert "all_reduce.busbw 0.004/0.85 GB/s" in body[0]
    assert [l.split("│")[2].strip() for l in body] == ["3", "0", "1", "2", "4"]
    assert lines[-1] == "faulty: vm#3"


def test_unwritable_output_is_refused_before_anything_is_measured(tmp_path):
    fixture = Path(__file__).parent / "fixtures" / "nvml_synthetic_h200x4_faulty.json"
    res = subprocess.run([sys.executable, "-m", "diag.netcheck.cli", "--switchbox-check", "--nvml-replay",
                          str(fixture), "--node-name", "boxA", "--format", "slurm", "--no-progress",
                          "--output", str(tmp_path / "missing-dir" / "faults.json")],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    # A usage error (2) at once, not after an hour of measuring: no verdict yet.
    assert res.returncode == 2, res.stderr
    assert res.stdout.strip() == ""
    err = res.stderr.splitlines()
    assert len(err) == 1 and err[0].startswith("netcheck: --output: cannot write")
    assert "writable directory" in err[0]


def test_taints_and_hostlist_keep_peers_words_on_their_own_line():
    """A reason or a peer's hostname with a newline must not become a line of the
    shell script --format taints prints, nor an escape reach the terminal."""
    lines = taint_commands({"n1": "slow\nkubectl delete nodes --all\x1b[2J" + "x" * 10_000,
                            "n2\nrm -rf ~": "down"}, "xpu-diag/faulty")
    assert len(lines) == 4
    assert all(l.startswith("# ") or l.startswith("kubectl taint nodes ") for l in lines), lines
    assert all(l.isprintable() and len(l) < 400 for l in lines), lines
    assert "\\nkubectl delete nodes --all\\x1b[2J" in lines[0]
    assert slurm_hostlist(["node3", "evil\x1b[2J\n"]) == "node3,evil\\x1b[2J\\n"
