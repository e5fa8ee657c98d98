"""tests/phases.py, make test's runner: the cgroup the parallel phase runs in,
its fallback where there is none, and the files of the alone and quiet phases."""

import os
import subprocess
import sys

import pytest

from tests import phases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_without_a_cpu_controller_the_phases_run_in_turn_and_say_so_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(phases, "CPU_CGROUPS", str(tmp_path / "no-cpu-controller"))
    assert phases.background_cgroup() is None
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "no cpu cgroup for the parallel phase" in out[0] and "runs before the alone phase, not beside it" in out[0]


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(phases.CPU_CGROUPS, os.W_OK),
                    reason="needs root and a writable cgroup v1 cpu controller")
def test_every_descendant_of_the_parallel_phase_is_in_its_cgroup_and_the_group_goes_after():
    path = phases.background_cgroup()
    assert path is not None
    try:
        with open(os.path.join(path, "cpu.shares")) as f:
            assert int(f.read()) == phases.BACKGROUND_SHARES
        # what phases.start does for the parallel phase, with a child that
        # starts a session of its own (as the launcher's jobs do)
        grandchild = ("import os, subprocess, sys; "
                      "print(subprocess.run([sys.executable, '-c', 'import os; print(open(\"/proc/self/cgroup\").read())'],"
                      " start_new_session=True, capture_output=True, text=True).stdout)")

        def join():
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        out = subprocess.run([sys.executable, "-c", grandchild], preexec_fn=join, capture_output=True,
                             text=True, timeout=60).stdout
        assert f":cpu:/{os.path.basename(path)}" in out or f":cpu,cpuacct:/{os.path.basename(path)}" in out, out
    finally:
        phases.remove_cgroup(path)
    assert not os.path.exists(path)


@pytest.mark.parametrize("mark", ["alone", "quiet"])
def test_the_alone_and_quiet_phases_collect_every_file_with_such_a_test(monkeypatch, mark):
    # What pytest itself selects with -m MARK, against the files phases.py
    # hands it. Any way of marking a test names the marker, so pytest reads
    # every test file that says it (the whole tree costs 4 CPU-s).
    monkeypatch.chdir(ROOT)
    saying = sorted(os.path.join(top, name) for top, _, names in os.walk("tests") for name in names
                    if name.startswith("test_") and name.endswith(".py")
                    and mark in open(os.path.join(top, name)).read())
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                          "-m", mark, *saying], capture_output=True, text=True, timeout=300).stdout
    selected = {line.split("::")[0] for line in out.splitlines() if "::" in line}
    assert selected, out
    assert set(phases.marked_files(mark)) == selected


def test_every_phase_writes_the_bytecode_of_what_it_imports(tmp_path, monkeypatch):
    # The set-up compiles nothing of the venv (the Makefile): with
    # PYTHONDONTWRITEBYTECODE left set, each of the suite's torch imports
    # would compile torch's modules anew. Each phase's pytest is started with
    # it unset, and so are the processes it starts.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(phases, "CPU_CGROUPS", str(tmp_path / "no-cpu-controller"))
    seen = []

    class Ran:
        returncode = 0

        def wait(self):
            return 0

        def poll(self):
            return 0

    def start(phase, *args, **kwargs):
        seen.append((phase, os.environ.get("PYTHONDONTWRITEBYTECODE")))
        return Ran()
    monkeypatch.setattr(phases, "start", start)
    monkeypatch.setattr(phases, "marked_files", lambda mark: [f"tests/test_{mark}.py"])
    monkeypatch.setattr(phases.subprocess, "run", lambda *a, **k: None)    # the slowest tests' list
    assert phases.main(["3"]) == 0
    assert seen == [("parallel", None), ("alone", None), ("quiet", None)]


def test_the_alone_phase_waits_for_every_parallel_worker_to_have_collected(tmp_path):
    # Real xdist workers of a real pytest, with this suite's conftest: a line each.
    (tmp_path / "test_some.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    said = tmp_path / "collected"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                             "-n", "2", "--rootdir", str(tmp_path), str(tmp_path)],
                            cwd=tmp_path, env=dict(env, PYTHONPATH=ROOT, **{phases.COLLECTED_ENV: str(said)}),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert phases.wait_collected(proc, str(said), 2, timeout=120)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, out
    assert sorted(said.read_text().split()) == ["gw0", "gw1"]     # once each, not by the tests' own processes


def test_waiting_for_the_workers_ends_when_the_phase_does_or_at_the_timeout(tmp_path):
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert phases.wait_collected(ended, str(tmp_path / "never"), 4, timeout=60) is False
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "one").write_text("gw0\n")
        assert phases.wait_collected(running, str(tmp_path / "one"), 2, timeout=0.5) is False
        assert phases.wait_collected(running, str(tmp_path / "one"), 1, timeout=5) is True
    finally:
        running.kill()
        running.wait()
