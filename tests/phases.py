"""`make test`'s three phases: the parallel one and the alone one side by
side, the alone one first in line for the CPU, then the quiet one.

Usage: ``python tests/phases.py WORKERS`` from the repository root, with the
venv's python. Each phase writes build/test-PHASE.xml (JUnit):
- parallel: ``-m "not alone and not quiet"``, WORKERS xdist workers, a file
  each at a time; its output is kept in build/test-parallel.log and printed
  when it is over;
- alone: ``-m alone``, one test at a time, printed as it goes, started once
  every parallel worker has collected;
- quiet: ``-m quiet``, one test at a time once both are over, with nothing
  beside it.
Then the 20 slowest tests of all three. The exit status is the first phase's
that failed.

Why side by side: the alone tests judge durations of seconds, so another
test's load must not reach them, but most of them use a fraction of a core;
run after the parallel phase they left CI's 2 cores idle for half their
250 s. Here the parallel phase runs in a cgroup of its own whose CPU weight
is a quarter of one task's (cgroup v1 ``cpu.shares``, as root): the alone
tests get the CPU they ask for, and the parallel phase takes what they
leave. A cgroup, not nice: nice weighs threads, so twenty runnable threads of
the rest outweigh an alone test's two ranks (session 19 tried it,
docs/bench-runs/s19-make-test-cpu.txt), and with autogroup scheduling every
job that starts a session of its own would get a full share again; a cgroup
weighs the phase as one, whatever its descendants do. The quiet tests wait
for both: they judge milliseconds, which even a low-weight neighbour's time
slice shows.

Where no such cgroup can be made (not root, no cpu controller), the phases
run one after the other, and that is said once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

CPU_CGROUPS = "/sys/fs/cgroup/cpu"
# The parallel phase's weight against the 1024 of each alone task (and of
# each autogroup): under contention it still gets a fifth of a core, so its
# own tests, which wait on timeouts of a few seconds, are slowed, not starved.
BACKGROUND_SHARES = 256
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
PHASES = ("parallel", "alone", "quiet")
# Where a parallel phase's worker says it has collected (tests/conftest.py),
# and how long the alone phase waits for them all at most.
COLLECTED_ENV = "XPU_DIAG_TEST_COLLECTED"
COLLECT_WAIT_S = 90.0


def background_cgroup() -> str | None:
    """A new cpu cgroup of BACKGROUND_SHARES, or None (said once) where this
    host gives none."""
    path = os.path.join(CPU_CGROUPS, f"xpu-diag-test-{os.getpid()}")
    try:
        os.mkdir(path)
        with open(os.path.join(path, "cpu.shares"), "w") as f:
            f.write(str(BACKGROUND_SHARES))
        return path
    except OSError as e:
        print(f"make test: no cpu cgroup for the parallel phase ({e.strerror}: {path}); "
              "it runs before the alone phase, not beside it", flush=True)
        try:
            os.rmdir(path)
        except OSError:
            pass
        return None


def remove_cgroup(path: str) -> None:
    # A process a test left behind goes back to the root group, so that the
    # directory can go.
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            left = f.read().split()
        for pid in left:
            with open(os.path.join(CPU_CGROUPS, "cgroup.procs"), "w") as f:
                f.write(pid)
        os.rmdir(path)
    except OSError:
        pass


def marked_files(mark: str) -> list[str]:
    """The test files that mark a test ``mark`` (alone, quiet). Collecting
    the whole tree for a phase of a few files costs its process 4 CPU-s."""
    found = []
    for top, _, names in os.walk("tests"):
        for name in sorted(names):
            path = os.path.join(top, name)
            if name.startswith("test_") and name.endswith(".py"):
                with open(path) as f:
                    if f"pytest.mark.{mark}" in f.read():
                        found.append(path)
    return sorted(found)


def start(phase: str, marks: str, extra: tuple[str, ...], paths: list[str],
          cgroup: str | None = None, env: dict | None = None) -> subprocess.Popen:
    """pytest for one phase; one in ``cgroup`` writes its output to
    build/test-PHASE.log, any other to ours."""
    def join() -> None:   # in the child, before exec: every descendant inherits it
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    argv = PYTEST + [f"--junitxml=build/test-{phase}.xml", *extra, "-m", marks, *paths]
    if not cgroup:
        return subprocess.Popen(argv, env=env)
    with open(os.path.join("build", f"test-{phase}.log"), "w") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=join, env=env)


def wait_collected(proc: subprocess.Popen, path: str, workers: int, timeout: float) -> bool:
    """Whether the parallel phase's ``workers`` have each collected (a line
    each in ``path``, tests/conftest.py) within ``timeout``, or it has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with open(path) as f:
                if len(f.read().splitlines()) >= workers:
                    return True
        except FileNotFoundError:
            pass
        time.sleep(0.2)
    return False


def ended(phase: str, rc: int, seconds: float, logged: bool = False) -> int:
    if logged:
        with open(os.path.join("build", f"test-{phase}.log")) as f:
            sys.stdout.write(f.read())
    print(f"==== make test: the {phase} phase exited {rc} after {seconds:.0f} s ====", flush=True)
    return rc


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python tests/phases.py WORKERS", file=sys.stderr)
        return 2
    # The set-up installs the venv's packages without bytecode: the first
    # process to import a module writes it (atomically), every later one
    # reads it. Compiling the whole venv up front took 28 s of both cores for
    # 13,000 files, of which the suite imports about 5,100; with writing off
    # (these VMs set PYTHONDONTWRITEBYTECODE) every torch import would compile
    # anew.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.makedirs("build", exist_ok=True)
    for name in [f"test-{phase}.xml" for phase in PHASES] + ["test-parallel.log", "test-parallel.collected"]:
        try:
            os.remove(os.path.join("build", name))
        except FileNotFoundError:
            pass
    runs = {"parallel": ("not alone and not quiet", ("-n", argv[0], "--dist", "loadfile", "--no-loadscope-reorder"),
                         ["tests"]),
            "alone": ("alone", (), marked_files("alone"))}
    rcs = {}
    began = time.monotonic()
    cgroup = background_cgroup()
    if cgroup:
        print(f"make test: the parallel phase runs beside the alone one, with cpu.shares {BACKGROUND_SHARES} "
              f"({cgroup})", flush=True)
        # The alone phase starts once the parallel phase's workers have
        # collected: each worker's collection is 5 CPU-s, 17 in a fresh venv
        # (it compiles what it imports), and given the CPU after the alone
        # tests' the four took 36 s, all of it on the path that ends make
        # test (the alone phase ends minutes before the parallel one).
        collected = os.path.join("build", "test-parallel.collected")
        procs = {"parallel": start("parallel", *runs["parallel"], cgroup=cgroup,
                                   env=dict(os.environ, **{COLLECTED_ENV: collected}))}
        wait_collected(procs["parallel"], collected, int(argv[0]), COLLECT_WAIT_S)
        procs["alone"] = start("alone", *runs["alone"])
        took = {}
        try:
            while len(took) < len(procs):
                for phase, proc in procs.items():
                    if phase not in took and proc.poll() is not None:
                        took[phase] = time.monotonic() - began
                time.sleep(0.5)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            remove_cgroup(cgroup)
        rcs["parallel"] = ended("parallel", procs["parallel"].returncode, took["parallel"], logged=True)
        rcs["alone"] = ended("alone", procs["alone"].returncode, took["alone"])
    else:
        for phase, run in runs.items():
            at = time.monotonic()
            rcs[phase] = ended(phase, start(phase, *run).wait(), time.monotonic() - at)
    at = time.monotonic()
    quiet = marked_files("quiet")
    if quiet:
        rcs["quiet"] = ended("quiet", start("quiet", "quiet", (), quiet).wait(), time.monotonic() - at)
    subprocess.run([sys.executable, "tests/slowest.py", "20", *(f"build/test-{phase}.xml" for phase in rcs)])
    return next((rc for rc in rcs.values() if rc), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
