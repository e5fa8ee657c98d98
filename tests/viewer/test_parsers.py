"""Parser units on real dump text (captured from py-spy 0.4, gdb 13, eu-stack 0.188)."""

from pathlib import Path

import pytest

from viewer.api import NATIVE, PYTHON, ViewerError
from viewer.parsers import eustack_text, gdb_text, parse_file, pyspy_json, pyspy_text, sniff

CASES = Path(__file__).parent / "data" / "cases"


def labels(thread):
    return [f.label for f in thread.frames]


def test_pyspy_json_native_is_root_first_and_normalises_addresses():
    res = pyspy_json.parse((CASES / "gloo4" / "rank00002-of-00004.py.json").read_text())
    (main,) = res.threads
    assert main.is_main and res.bad_lines == 0
    assert labels(main)[0] == "??@libc.so.6"  # 0x7f... differs per rank (ASLR)
    assert labels(main)[-3:] == ["stall_before_all_reduce@stalled_gloo.py:9", "time_sleep@libpython3.11.so.1.0",
                                 "clock_nanosleep@libc.so.6"]
    assert [f.kind for f in main.frames[-3:]] == [PYTHON, NATIVE, NATIVE]


def test_pyspy_json_fast_path_equals_full_parse_and_keeps_ids():
    text = (CASES / "formats" / "rank00002-of-00003.py.json").read_text()
    other = text.replace("5007", "6007").replace("5013", "6013")
    first, second = pyspy_json.parse(text), pyspy_json.parse(other)  # second: from the template
    assert second == pyspy_json._parse_json(other)
    assert [t.tid for t in second.threads] == [6013, 6007] and second.pid == 6007
    moved = text.replace('"line": 2,', '"line": 7,')  # a real difference must not hit the template
    assert labels(pyspy_json.parse(moved).threads[1])[-1] == "inner@stall.py:7"
    assert first != second


def test_pyspy_json_counts_bad_entries():
    res = pyspy_json.parse('[{"thread_name": "a", "frames": [{"name": "f", "line": 1}]}, {"frames": 3}, 7]')
    assert len(res.threads) == 1 and res.bad_lines == 2


def test_pyspy_text_skips_locals_and_counts_junk():
    text = ('Process 9: python t.py\nPython v3.11.7 (/usr/bin/python3)\n\nThread 9 (active): "MainThread"\n'
            "    f (t.py:3)\n        Arguments:\n            x: 1\n    <module> (t.py:9)\nnot a frame\n")
    res = pyspy_text.parse(text)
    assert labels(res.threads[0]) == ["<module>@t.py:9", "f@t.py:3"] and res.threads[0].is_main
    assert res.bad_lines == 1


def test_gdb_inlined_frames_and_libraries():
    text = ("[New LWP 12]\nThread 1 (Thread 0x7f (LWP 11) \"python\"):\n"
            "#0  0x00007f in __GI___poll (fds=0x1, nfds=1) at ../sysdeps/poll.c:29\n"
            "#1  time_sleep (self=<optimized out>) at ./Modules/timemodule.c:383\n"
            "#2  0x00007f in ?? () from /usr/lib/libnccl.so.2\n"
            "#3  0x00007f in main ()\n"
            "garbage\n")
    res = gdb_text.parse(text)
    (t,) = res.threads
    assert t.is_main and t.tid == 11 and res.pid == 11 and res.bad_lines == 1
    assert labels(t) == ["main", "??@libnccl.so.2", "time_sleep@timemodule.c:383", "__GI___poll@poll.c:29"]


def test_eustack_versions_and_sources():
    res = parse_file(CASES / "formats" / "rank00001-of-00003.eu-stack.txt", "eu-stack")
    main = [t for t in res.threads if t.is_main][0]
    assert labels(main)[-1] == "clock_nanosleep@clock_nanosleep.c:48"  # @GLIBC_2.2.5 dropped, -s source kept
    plain = eustack_text.parse("PID 5 - process\nTID 5:\n#0  0x00007f clock_nanosleep@GLIBC_2.2.5\n")
    assert labels(plain.threads[0]) == ["clock_nanosleep"]


@pytest.mark.parametrize("text, kind", [
    ("[\n  {", "py-json"), ("[]", "py-json"), ("[New LWP 3]\nThread 1 (Thread 0x1 (LWP 3) \"p\"):", "gdb"),
    ("PID 1 - process\nTID 1:", "eu-stack"), ('Process 1: x\nThread 1 (idle): "MainThread"', "py-text"),
    ("hello", None),
])
def test_sniff(text, kind):
    assert sniff(text) == kind


def test_parse_file_rejects_binary_and_unknown(tmp_path):
    (tmp_path / "a").write_bytes(b"\0\1\2junk")
    (tmp_path / "b").write_text("hello world\n")
    with pytest.raises(ViewerError, match="binary data"):
        parse_file(tmp_path / "a", None)
    with pytest.raises(ViewerError, match="not a py-spy, gdb or eu-stack dump"):
        parse_file(tmp_path / "b", None)
