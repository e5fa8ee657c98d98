"""tests/slowest.py, the end of `make test`: the slowest tests by wall time,
each with the CPU-seconds tests/conftest.py recorded for it, from a real
pytest run's JUnit XML."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPIN = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
TESTS = f'''
import subprocess, sys, time

def test_spins_here():
    exec({SPIN!r})

def test_spins_in_a_child():
    subprocess.run([sys.executable, "-c", {SPIN!r}], check=True)

def test_sleeps():
    time.sleep(0.6)
'''


def test_each_slow_test_is_listed_with_the_cpu_it_and_its_children_spent(tmp_path):
    (tmp_path / "test_some.py").write_text(TESTS)
    xml = tmp_path / "phase.xml"
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                          f"--junitxml={xml}", "--rootdir", str(tmp_path), str(tmp_path)],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "slowest.py"), "3", str(xml),
                          str(tmp_path / "missing.xml")], capture_output=True, text=True, check=True).stdout
    rows = {line.split()[-1].rsplit("::", 1)[-1]: line.split() for line in out.splitlines() if "::" in line}
    assert set(rows) == {"test_spins_here", "test_spins_in_a_child", "test_sleeps"}, out
    wall, cpu = {n: float(r[0][:-1]) for n, r in rows.items()}, {n: float(r[1][:-1]) for n, r in rows.items()}
    assert cpu["test_spins_here"] >= 0.35 and cpu["test_spins_in_a_child"] >= 0.35, out
    assert wall["test_sleeps"] >= 0.55 and cpu["test_sleeps"] < 0.2, out
    assert out.splitlines()[0] == "slowest: no %s (that phase did not run)" % (tmp_path / "missing.xml"), out
    listed = [wall[n] for n in rows]
    assert listed == sorted(listed, reverse=True), out      # by wall time, not by CPU


def test_a_report_that_is_not_junit_xml_is_named_in_one_line(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text("not xml")
    ran = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "slowest.py"), "5", str(bad)],
                         capture_output=True, text=True)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.startswith(f"slowest: {bad} is not a JUnit XML report") and ran.stderr.count("\n") == 1


def test_a_failed_test_is_named_last_with_the_first_line_of_its_message(tmp_path):
    # CI shows only the end of make test's output: the failure must be there.
    (tmp_path / "test_bad.py").write_text(
        "import pytest\n\n"
        "def test_passes():\n    pass\n\n"
        "def test_fails():\n    assert 1 == 2, 'one is not two\\nmore'\n\n"
        "@pytest.fixture\ndef broken():\n    raise OSError('no such thing')\n\n"
        "def test_errors(broken):\n    pass\n")
    xml = tmp_path / "test-quiet.xml"
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                          "--rootdir", str(tmp_path), str(tmp_path)], cwd=tmp_path, capture_output=True, text=True)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "slowest.py"), "5", str(xml)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[-3] == "==== 2 of make test's tests failed ====", out
    failed, errored = out[-2].split(), out[-1].split()
    assert failed[:3] == ["FAILED", "test-quiet", "test_bad.py::test_fails:"], out
    assert "one is not two" in out[-2] and "more" not in out[-2], out
    assert errored[:3] == ["ERROR", "test-quiet", "test_bad.py::test_errors:"] and "no such thing" in out[-1], out
