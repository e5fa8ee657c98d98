"""The order in which `make test`'s parallel phase hands files to its workers.

`make test`'s parallel phase runs ``-n 3 --dist loadfile --no-loadscope-reorder``
(tests/phases.py): each file is
one unit (its module fixtures run once), given out in collection order to the
worker that runs dry first. xdist's own order (files with the most tests
first) leaves the few-but-long files (real multi-rank jobs, a minute or more
each) for last, and the phase then ends on one worker while the other idles.
Longest first instead: the short files fill in around them at the end.
"""

from __future__ import annotations

import os
import resource
import time

import pytest

from tests import preloaded

# Files whose tests start real jobs, by the seconds their non-`alone` tests
# took in all (build/test-parallel.xml of a CI-path run), longest first. The
# figures only order the queue: a stale one costs some idle time at the end of
# the phase, never a test. Files not named here keep their collection order.
LONGEST_FIRST = (
    "tests/recover/test_recover_e2e.py",            # ~260 s: its launches are the suite's longest
    "tests/frameworks/test_frameworks.py",          # ~210 s: 10 planted jobs, several at a time
    "tests/recover/test_deepspeed.py",              # ~185 s: three DeepSpeed jobs side by side
    "tests/frameworks/test_lightning_teardown.py",  # ~55 s: 4 Lightning runs, three at a time
    "tests/functional/test_launch.py",              # ~100 s
    "tests/functional/test_verdicts.py",            # ~80 s: seven jobs at once
    "tests/netcheck/test_netns_pairwise.py",        # ~65 s
    "tests/tracer/test_tracer.py",                  # ~40 s
    "tests/functional/test_stalls.py",              # ~25 s
    "tests/collector/test_report_relays.py",        # ~25 s
    "tests/functional/test_deadlock.py",            # ~25 s: three jobs at once
    "tests/functional/test_untrusted_shm.py",       # ~25 s
    "tests/functional/test_fast_host.py",           # ~22 s
    "tests/functional/test_groups.py",              # ~21 s
    "tests/kernel_hook/test_hang_e2e.py",           # ~21 s
    "tests/kernel_hook/test_link_e2e.py",           # ~21 s
    "tests/functional/test_collector_life.py",      # ~21 s
    "tests/perf/test_perf_job.py",                  # ~18 s
    "tests/tracer/test_cpp_collectives.py",         # ~18 s
    "tests/gpu_health/test_gpu_job.py",             # ~18 s
    "tests/perf/test_prometheus_shards.py",         # ~17 s
    "tests/functional/test_closing.py",             # ~17 s
    "tests/recover/test_persist.py",                # ~17 s
    "tests/functional/test_failed.py",              # ~16 s
    "tests/timeline/test_timeline_e2e.py",          # ~16 s
)
_RANK = {path: i for i, path in enumerate(LONGEST_FIRST)}


def pytest_collection_modifyitems(config, items):
    # A stable sort: within a file the order pytest chose (module fixtures,
    # their parameters) stays as it was.
    items.sort(key=lambda item: _RANK.get(item.nodeid.split("::", 1)[0], len(_RANK)))


def pytest_collection_finish(session):
    # An xdist worker of make test's parallel phase says it has collected:
    # tests/phases.py starts the alone phase then. One line, appended: one
    # write of a few bytes to a file opened O_APPEND is not interleaved.
    path = os.environ.pop("XPU_DIAG_TEST_COLLECTED", None)   # not for the processes its tests start
    if path and "PYTEST_XDIST_WORKER" in os.environ:
        with open(path, "a") as f:
            f.write(os.environ["PYTEST_XDIST_WORKER"] + "\n")


# Each test's CPU-seconds, next to its wall time in the JUnit XML (the
# property cpu_s; tests/slowest.py prints it): on CI's 2 cores the suite is
# bound by CPU, and most of it goes on starting processes that import torch.
# Counted: this process and every child it has reaped, with what they reaped,
# and the preloaded-torch server's children (launchers, forked ranks), which
# it reaps, not this process.
_CPU_AT_START = pytest.StashKey[float]()


def _cpu_s() -> float:
    return preloaded.cpu_s() + sum(use.ru_utime + use.ru_stime
                                   for use in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))


# Beside it, when the test started (epoch seconds) and on which xdist worker:
# JUnit has neither, and without them which files leave the cores idle at the
# parallel phase's end is a guess (docs/bench-runs/s26-make-test.txt).
_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_CPU_AT_START] = _cpu_s()
    item.stash[_STARTED] = time.time()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown" and _CPU_AT_START in item.stash:
        props = outcome.get_result().user_properties
        props.append(("cpu_s", f"{_cpu_s() - item.stash[_CPU_AT_START]:.2f}"))
        props.append(("started", f"{item.stash[_STARTED]:.1f}"))
        props.append(("worker", os.environ.get("PYTEST_XDIST_WORKER", "main")))
