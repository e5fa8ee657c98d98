"""Golden tests: folded stacks and summaries of hand-checked event directories.

Cases (tests/viewer/data/cases/): gloo4 = real py-spy --native --json dumps of
a 4-rank gloo job with rank 2 stalled, plus hang.json; formats = gdb, eu-stack,
py-spy text and json in one event, with a rank behind in seq; plain = a bare
directory of py-spy text dumps named without the rank-of-world pattern;
corrupt = truncated JSON, junk lines, binary junk; gloo4_allformats = py-spy, gdb and
eu-stack dumps of one real stalled gloo job (gdb then gives the native view); traced4 = `make demo`'s
job under xpu_timer_launch (py-spy --native and eu-stack dumps, the tracer's frames between the user's
call and torch's, the collector's hang.json). Re-record: see goldens.py.
"""

import pytest

from tests.viewer.goldens import CASES, COMPARED, EXPECTED, outputs

CASE_NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir())


@pytest.mark.parametrize("case", CASE_NAMES)
def test_outputs_match_goldens(case):
    got = outputs(CASES / case)
    for name in COMPARED:
        assert got[name] == (EXPECTED / case / name).read_text(), f"{case}/{name} differs from its golden"


def test_gloo_golden_names_the_stalled_rank():
    summary = (EXPECTED / "gloo4" / "summary.txt").read_text()
    assert "Odd ranks out (not at stack #1), innermost Python frame:\n  rank 2: stall_before_all_reduce@" in summary
    folded = (EXPECTED / "gloo4" / "py_stack.folded").read_text()
    assert "all_reduce@torch/distributed/distributed_c10d.py:3252@0-1,3|2 3\n" in folded


def test_never_entered_culprits_and_mismatch_come_from_hang_json():
    summary = (EXPECTED / "formats" / "summary.txt").read_text()
    assert ("rank 1: broadcast (group 7, seq 40)  <- NEVER ENTERED broadcast seq 41 (last started seq 40)"
            in summary)
    assert "  culprits: rank 1\n" in summary
    assert "  mismatch: the ranks diverged at seq 40: rank 1 broadcast 4 B" in summary


def test_corrupt_inputs_are_counted_not_fatal():
    summary = (EXPECTED / "corrupt" / "summary.txt").read_text()
    assert "Skipped 3 unreadable lines in 2 files" in summary
    assert "rank 3: <CASE>/rank00003-of-00004.py.json: binary data" in summary
    # The truncated JSON still gave its complete first thread.
    assert "worker-1@1-2|0,3" in (EXPECTED / "corrupt" / "py_stack.folded").read_text()


def test_real_gdb_dumps_drive_the_native_view():
    """gloo4_allformats: py-spy, gdb and eu-stack of one real stalled gloo job; gdb wins the native view."""
    folded = (EXPECTED / "gloo4_allformats" / "cpp_stack.folded").read_text()
    threads = {line.split(";")[0].split("@")[0] for line in folded.splitlines()}
    assert threads == {"MainThread", "gloo_tcp_loop", "pt_gloo_runloop", "pt_gloo_runloop#2", "pt_tcpstore_uv"}
    main = [line for line in folded.splitlines() if line.startswith("MainThread")]
    assert any("c10d::Work::wait@libtorch_cpu.so@0-1,3|2" in line and line.endswith(" 3") for line in main)
    assert any("__GI___clock_nanosleep@clock_nanosleep.c:48@2|0-1,3 1" in line for line in main)
    assert "pt_tcpstore_uv@0|1-3" in folded  # the TCPStore server thread lives on rank 0 only
