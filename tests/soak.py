"""How many times the race tests repeat a job.

A race lost once in N runs needs many runs to be seen. `make test` runs each
race's job a couple of times, as the user's job that must exit 0: the fixes
are checked on every run by deterministic jobs (the tracer's exit handler,
its weak hold on groups), and a few repeats would see a 1-in-15 race by
chance at best, at 10-12 CPU-s a run. `make soak` (XPU_DIAG_SOAK=1) runs the
counts the races were first measured with: that is where a race is measured."""

import os


def runs(in_make_test: int, in_soak: int) -> int:
    return in_soak if os.environ.get("XPU_DIAG_SOAK") == "1" else in_make_test
