"""Real dumps: real py-spy on a real 4-rank gloo job whose rank 2 never reaches all_reduce."""

import shutil
import subprocess
import sys


def run_viewer(*args):
    return subprocess.run([sys.executable, "-m", "viewer", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_viewer_names_the_stalled_rank(gloo_timeline, tmp_path):
    proc = run_viewer("--path", gloo_timeline, "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = (tmp_path / "summary.txt").read_text()
    assert "#1   3 ranks      ranks 0-1,3\n       at  all_reduce@torch/distributed/distributed_c10d.py" in summary
    assert "rank 2: stall_before_all_reduce@stalled_gloo.py:9" in summary
    folded = (tmp_path / "py_stack.folded").read_text().splitlines()
    counts = {line.rsplit(" ", 1)[0].rsplit(";", 1)[1].split("@")[0]: int(line.rsplit(" ", 1)[1])
              for line in folded if line.startswith("MainThread")}
    assert counts == {"all_reduce": 3, "stall_before_all_reduce": 1}
    # Native view (eu-stack where installed, else py-spy --native): 0,1,3 wait in c10d, 2 sleeps.
    cpp = (tmp_path / "cpp_stack.folded").read_text()
    main = [line for line in cpp.splitlines() if line.startswith("MainThread")]
    assert any("c10d::Work::wait@" in line and line.endswith(" 3") for line in main), main
    assert any("clock_nanosleep" in line and "@2|0-1,3" in line and line.endswith(" 1") for line in main), main
    if shutil.which("eu-stack"):  # unnamed native threads line up by role across ranks
        assert "thread[gloo::transport::tcp::Loop::run]@0-3|" in cpp
        assert "thread[c10d::detail::LibUVStoreDaemon::run]@0|1-3" in cpp  # the TCPStore server: rank 0 only
    svg = (tmp_path / "py_stack.svg").read_text()
    assert 'data-l="stall_before_all_reduce@stalled_gloo.py:9@2|0-1,3"' in svg
    table = proc.stdout.split("stack-viewer: wrote")[0]  # the rich table on the terminal
    rows = [ln.split()[:4] for ln in table.splitlines()]
    assert "Where ranks are stuck" in table and ["#1", "0-1,", "3", "3"] in rows and ["#2", "2", "1", "at"] in rows
    assert "Odd ranks out (not at stack #1), innermost Python frame:\n  rank 2: stall_before_all_reduce@" in table


def test_rank_and_world_come_from_file_names(gloo_timeline, tmp_path):
    (event,) = (gloo_timeline / "job").iterdir()
    # Drop rank 1's dump: the world still is 4 (from the names), rank 1 is "leak" everywhere.
    event_copy = tmp_path / "ev"
    event_copy.mkdir()
    for f in event.iterdir():
        if "rank00001" not in f.name:
            (event_copy / f.name).write_bytes(f.read_bytes())
    proc = run_viewer("--path", event_copy, "--out", tmp_path / "out", "--format", "text,folded")
    assert proc.returncode == 0, proc.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "world size 4; 3 ranks with Python stacks" in summary
    assert "No usable stack for 1 rank: 1" in summary
    assert "@0,3|1-2" in (tmp_path / "out" / "py_stack.folded").read_text()
