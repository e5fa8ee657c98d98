"""The worker of bench/deadlock_race.py's torchrun rows: a test script run
the way a user of plain torchrun on gloo would set it up to debug a hang.

    python -m torch.distributed.run ... bench/gloo_user_worker.py SCRIPT [ARGS...]

Two things, neither of which changes what SCRIPT does:

- The process group's timeout. ``init_process_group`` gets
  ``timeout=timedelta(seconds=$PG_TIMEOUT_S)`` unless the script passes its
  own (gloo's default is 30 minutes: a hang says nothing for half an hour).
  Groups made by ``new_group`` keep their own default, as in a user's job
  that sets the timeout only where it inits.
- Flight Recorder's dump. torch 2.13 records gloo collectives in Flight
  Recorder (on by default, 2000 entries; ``TORCH_FR_BUFFER_SIZE`` sets the
  size): each all-reduce with its group, seq and sizes. But nothing writes
  the records out: the dump on
  timeout is the NCCL watchdog's (``TORCH_NCCL_DUMP_ON_TIMEOUT``, absent
  from the CPU build) and gloo has no watchdog. So this worker writes
  ``torch._C._distributed_c10d._dump_fr_trace()`` to
  ``$TORCH_FR_DUMP_TEMP_FILE<rank>``, the file NCCL's dump would write, when
  an exception ends SCRIPT (gloo's timeout or a peer's closed connection),
  when it exits (a rank that left early), and when torchrun stops it with
  SIGTERM after another rank failed: NCCL's dump on timeout has every rank
  dump, and a rank blocked in a collective with a longer timeout (a group of
  ``new_group``'s) is the one the others wait for. A rank aborted inside gloo
  (``gloo::EnforceNotMet``) or killed by SIGKILL writes none.
"""

import atexit
import datetime
import os
import runpy
import signal
import sys
import threading

# SIGTERM is blocked in every thread (torch's and gloo's inherit the mask)
# and taken by one that dumps, then dies of it as before: a Python handler
# would run only once the main thread left gloo's wait.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

import torch._C._distributed_c10d as c10d  # noqa: E402
import torch.distributed as dist  # noqa: E402

_lock = threading.Lock()
_written = []


def dump_fr() -> None:
    """This rank's Flight Recorder buffer to $TORCH_FR_DUMP_TEMP_FILE<rank>, once."""
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    with _lock:
        if not prefix or _written:
            return
        _written.append(True)
        _write(prefix)


def _write(prefix: str) -> None:
    try:
        data = c10d._dump_fr_trace()
        path = f"{prefix}{os.environ.get('RANK', '0')}"
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    except Exception as e:   # the dump must not hide the job's own error
        sys.stderr.write(f"gloo_user_worker: rank {os.environ.get('RANK')}: Flight Recorder dump failed: {e!r}\n")


def _dump_on_sigterm() -> None:
    signal.sigwait({signal.SIGTERM})
    dump_fr()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.kill(os.getpid(), signal.SIGTERM)   # this thread takes it: the default action, exit by SIGTERM


def _with_timeout(init):
    def init_process_group(*args, **kwargs):
        if "timeout" not in kwargs and os.environ.get("PG_TIMEOUT_S"):
            kwargs["timeout"] = datetime.timedelta(seconds=float(os.environ["PG_TIMEOUT_S"]))
        return init(*args, **kwargs)
    return init_process_group


def _dump_first(destroy):
    # The test scripts destroy their group before the exit handlers run.
    def destroy_process_group(*args, **kwargs):
        dump_fr()
        return destroy(*args, **kwargs)
    return destroy_process_group


def main() -> None:
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    dist.init_process_group = _with_timeout(dist.init_process_group)
    dist.destroy_process_group = _dump_first(dist.destroy_process_group)
    atexit.register(dump_fr)
    threading.Thread(target=_dump_on_sigterm, name="fr-dump-on-sigterm", daemon=True).start()
    try:
        runpy.run_path(script, run_name="__main__")
    except BaseException:
        dump_fr()
        raise


if __name__ == "__main__":
    main()
