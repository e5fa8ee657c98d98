"""Bad input through the real CLI: one clear line on stderr, never a traceback."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CASES = Path(__file__).parent / "data" / "cases"
GOOD = CASES / "gloo4" / "rank00000-of-00004.py.json"


def viewer(*args, prefix=()):
    return subprocess.run([*prefix, sys.executable, "-m", "viewer", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def assert_one_clean_line(proc, *needles):
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines and all(line.startswith("stack-viewer: ") for line in lines), proc.stderr
    for n in needles:
        assert n in proc.stderr, proc.stderr


def test_empty_dir_gives_error_svg_and_nonzero_exit(tmp_path):
    (tmp_path / "in").mkdir()
    proc = viewer("--path", tmp_path / "in", "--out", tmp_path / "out")
    assert proc.returncode == 1
    assert_one_clean_line(proc, "no stack dumps", "wrote error pictures")
    svg = (tmp_path / "out" / "py_stack.svg").read_text()
    assert "ERROR: --path" in svg and "no stack dumps" in svg


def test_a_folder_without_dumps_gets_one_line_and_nothing_written_into_it(tmp_path):
    # Issue 43: run on an empty folder, it wrote py_stack.svg and cpp_stack.svg there.
    proc = viewer("--path", tmp_path)
    assert proc.returncode == 1
    assert_one_clean_line(proc, "no stack dumps")
    assert "wrote" not in proc.stderr and list(tmp_path.iterdir()) == []
    # An event directory with hang.json and a rank's error but no dump: the same.
    event = tmp_path / "job" / "20261122T120000Z"
    event.mkdir(parents=True)
    shutil.copy(CASES / "gloo4" / "hang.json", event)
    (event / "rank00000-of-00004.error.txt").write_text("py-spy: permission denied\n")
    for path in (tmp_path, event):
        proc = viewer("--path", path)
        assert proc.returncode == 1
        assert_one_clean_line(proc, f"--path {event}: no stack dumps in it")
        assert sorted(p.name for p in event.iterdir()) == ["hang.json", "rank00000-of-00004.error.txt"]


def test_missing_path(tmp_path):
    proc = viewer("--path", tmp_path / "nope")
    assert proc.returncode == 1
    assert_one_clean_line(proc, "no such directory")


def test_only_binary_junk_gives_error_svg(tmp_path):
    (tmp_path / "rank00000-of-00002.py.json").write_bytes(b"\x7fELF\0\1\2" * 50)
    (tmp_path / "rank00001-of-00002.py.json").write_bytes(os.urandom(64) + b"\0")
    proc = viewer("--path", tmp_path, "--out", tmp_path / "out")
    assert proc.returncode == 1
    assert_one_clean_line(proc, "binary data, not a stack dump", "no usable stacks")
    assert "ERROR: no usable stacks" in (tmp_path / "out" / "cpp_stack.svg").read_text()


def test_truncated_json_keeps_complete_threads(tmp_path):
    text = (CASES / "formats" / "rank00002-of-00003.py.json").read_text()  # worker-1, then MainThread
    (tmp_path / "rank00000-of-00002.py.json").write_text(text)
    (tmp_path / "rank00001-of-00002.py.json").write_text(text[: text.index('"MainThread"')])
    proc = viewer("--path", tmp_path, "--out", tmp_path / "out", "--format", "text")
    assert_one_clean_line(proc, "skipped 1 unreadable lines in 1 files")
    assert proc.returncode == 0
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "world size 2; 2 ranks with Python stacks" in summary  # rank 1 kept its worker-1 thread


def test_truncated_json_before_any_thread(tmp_path):
    (tmp_path / "rank00000-of-00002.py.json").write_text(GOOD.read_text())
    (tmp_path / "rank00001-of-00002.py.json").write_text('[\n  {\n    "pid": 12,')
    proc = viewer("--path", tmp_path, "--out", tmp_path / "out", "--format", "text")
    assert proc.returncode == 0
    assert_one_clean_line(proc, "rank00001-of-00002.py.json: no usable stack in this py-json dump")
    assert "rank 1: " in (tmp_path / "out" / "summary.txt").read_text()


def test_duplicate_ranks_keep_the_first_and_say_so(tmp_path):
    shutil.copy(GOOD, tmp_path / "rank00000-of-00001.py.json")
    shutil.copy(CASES / "plain" / "trainer-host-a-1.txt", tmp_path / "rank00000-of-00001.py.txt")
    proc = viewer("--path", tmp_path, "--out", tmp_path / "out", "--format", "folded")
    assert proc.returncode == 0
    assert_one_clean_line(proc, "duplicate rank 0: rank00000-of-00001.py.json and rank00000-of-00001.py.txt")
    assert "load_batch" not in (tmp_path / "out" / "py_stack.folded").read_text()


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None,
                    reason="root reads anything; needs setpriv (util-linux) to drop CAP_DAC_*")
def test_unreadable_dir(tmp_path):
    d = tmp_path / "locked"
    d.mkdir()
    shutil.copy(GOOD, d / "rank00000-of-00001.py.json")
    d.chmod(0o000)
    tmp_path.chmod(0o755)
    try:
        # root reads anything: run it without capabilities, as a plain owner would be.
        prefix = ("setpriv", "--bounding-set=-all", "--inh-caps=-all") if os.geteuid() == 0 else ()
        proc = viewer("--path", d, prefix=prefix)
    finally:
        d.chmod(0o755)
    assert proc.returncode == 1
    assert_one_clean_line(proc, "permission denied")


def test_unwritable_out(tmp_path):
    shutil.copy(GOOD, tmp_path / "rank00000-of-00001.py.json")
    (tmp_path / "out").write_text("a file, not a dir")
    proc = viewer("--path", tmp_path, "--out", tmp_path / "out")
    assert proc.returncode == 1
    assert_one_clean_line(proc, "--out")


def test_many_bad_files_do_not_flood_the_terminal(tmp_path):
    shutil.copy(GOOD, tmp_path / "rank00000-of-00009.py.json")
    for r in range(1, 9):
        (tmp_path / f"rank{r:05d}-of-00009.py.json").write_bytes(b"\0junk")
    proc = viewer("--path", tmp_path, "--out", tmp_path / "out", "--format", "text")
    assert proc.returncode == 0
    assert_one_clean_line(proc, "... and 3 more notes in summary.txt")
    assert proc.stderr.count("binary data") == 5
    assert (tmp_path / "out" / "summary.txt").read_text().count("binary data") == 8 + 8  # per rank + notes
