"""Run torch.distributed.run in this process and turn its outcome into a status.

torchrun itself exits 1 (through an uncaught exception) when a worker fails;
we print its failure summary and return 1 the same way, without a traceback.
"""

from __future__ import annotations

import signal
import sys

from diag.common.children import dies_with_this_thread


def run(argv: list[str], log_dir: str | None = None, failures: dict | None = None) -> int:
    """``log_dir``: torch's log directory when the user chose none (below).
    ``failures``: filled with {global rank: exit code} of the failed workers
    (the launcher's closing summary tells its own SIGKILL from a crash)."""
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
        sys.stderr.write(exc.format_msg() + "\n")
        return 1
    except SignalException as exc:
        sys.stderr.write(f"xpu_timer_launch: stopped by signal {exc.sigval}\n")
        return 128 + int(exc.sigval)


def workers_die_with_launcher() -> bool:
    """Every worker torch's elastic agent starts gets SIGKILL when this
    process dies (PR_SET_PDEATHSIG, set in the child before it execs: a
    Python worker, a --no-python command alike). Plain torchrun leaves them
    running under PID 1 when it is killed by SIGKILL, holding their GPUs.
    Workers are forked by the thread that runs torchrun (this, the main one),
    which lives as long as the launcher. Returns False, said once, where
    torch's worker start-up is not where this torch version had it."""
    try:
        from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler as handler
        popen = handler.Popen
    except (ImportError, AttributeError) as exc:
        sys.stderr.write(f"xpu_timer_launch: cannot reach torch's worker start-up ({exc}); workers may outlive "
                         f"a launcher killed by SIGKILL (kill them by hand then)\n")
        return False
    if getattr(popen, "dies_with_launcher", False):
        return True

    def dying_popen(*args, **kwargs):
        if kwargs.get("preexec_fn") is None:
            kwargs["preexec_fn"] = dies_with_this_thread(signal.SIGKILL)
        return popen(*args, **kwargs)
    dying_popen.dies_with_launcher = True
    handler.Popen = dying_popen
    return True
