"""How many times the race tests repeat a job.

A race lost once in N runs needs many runs to be seen; `make test` runs
enough to catch a regression of the size issue 18 fixed most of the time and
stays near its 10-minute budget; `make soak` (XPU_DIAG_SOAK=1) runs the
counts the races were first measured with."""

import os


def runs(in_make_test: int, in_soak: int) -> int:
    return in_soak if os.environ.get("XPU_DIAG_SOAK") == "1" else in_make_test
