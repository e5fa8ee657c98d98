"""Run torch.distributed.run in this process and turn its outcome into a status.

torchrun itself exits 1 (through an uncaught exception) when a worker fails;
we print its failure summary and return 1 the same way, without a traceback.
"""

from __future__ import annotations

import os
import sys

from diag.common.children import tie_to_this_process


def run(argv: list[str], log_dir: str | None = None, failures: dict | None = None,
        outcome: dict | None = None) -> int:
    """``log_dir``: torch's log directory when the user chose none (below).
    ``failures``: filled with {global rank: exit code} of the failed workers
    (the launcher's closing summary tells its own SIGKILL from a crash).
    ``outcome``: filled with torchrun's own result, for the FAILED verdict
    (diag/launcher/exits.py): ``failures`` {global rank: ProcessFailure},
    ``root`` (the rank its "Root Cause" names), or ``signal`` (it was stopped)."""
    from torch.distributed import run as trun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = trun.parse_args(argv)
    # Without --log-dir torch makes /tmp/torchelastic_<random> for the
    # workers' error files on every launch and never removes it (hundreds
    # on a test host in a day). Unless the user asked for log files worth
    # keeping (--log-dir, --redirects, --tee), it goes in the node's private
    # directory: removed on exit, swept after a SIGKILL.
    if log_dir is not None and args.log_dir is None and str(args.redirects) == "0" and str(args.tee) == "0":
        args.log_dir = log_dir
    workers_die_with_launcher()
    try:
        trun.run(args)
        return 0
    except ChildFailedError as exc:
        if failures is not None:
            failures.update({rank: f.exitcode for rank, f in exc.failures.items()})
        if outcome is not None and exc.failures:
            outcome.update(failures=dict(exc.failures), root=exc.get_first_failure()[0])
        sys.stderr.write(exc.format_msg() + "\n")
        return 1
    except SignalException as exc:
        if outcome is not None:
            outcome["signal"] = int(exc.sigval)
        sys.stderr.write(f"xpu_timer_launch: stopped by signal {exc.sigval}\n")
        return 128 + int(exc.sigval)


def workers_die_with_launcher() -> None:
    """Every worker torch's elastic agent starts gets SIGKILL when this
    process dies: each Python worker ties itself at start-up (the bootstrap
    calls diag.common.children.die_with_launcher), told this process's pid
    through the environment torchrun hands it. Plain torchrun leaves its
    workers running under PID 1 when it is killed by SIGKILL, holding their
    GPUs. Workers are forked by the thread that runs torchrun (this, the main
    one), which lives as long as the launcher. Not covered: a --no-python
    command (nothing of ours runs in it)."""
    os.environ.update(tie_to_this_process({}))
