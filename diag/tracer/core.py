"""Tracer state: the region writer, per-communicator sequence numbers, the off switch.

Contract: nothing here ever raises into training code. A failure inside the
tracer switches it off (one line on stderr, region flagged disabled) and every
patched function then calls straight through to the original.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from diag.common import envnames
from diag.records import format as fmt
from diag.records.writer import RecordWriter
from diag.tracer import current

ENV_SHM_DIR = envnames.SHM_DIR
ENV_DISABLE = envnames.TRACER_DISABLE
ENV_CAPACITY = envnames.RING_CAPACITY
ENV_HOST_FUNCS = envnames.HOST_TRACING_FUNC
# Set by the tracer in its own process, so that processes the worker spawns
# (which inherit RANK) do not create a second region for the same rank.
ENV_OWNER_PID = envnames.TRACER_PID


class Op:
    """One traced op between START and END."""

    __slots__ = ("op_id", "kind", "name", "comm_id", "seq", "nbytes", "comm_rank",
                 "comm_size", "t0")

    def __init__(self, op_id, kind, name, comm_id, seq, nbytes, comm_rank, comm_size, t0):
        self.op_id, self.kind, self.name = op_id, kind, name
        self.comm_id, self.seq, self.nbytes = comm_id, seq, nbytes
        self.comm_rank, self.comm_size, self.t0 = comm_rank, comm_size, t0


class Tracer:
    """Writes START/END records for one process. Thread-safe."""

    def __init__(self, writer: RecordWriter, rank: int = -1):
        self.writer = writer
        self.rank = rank
        self.enabled = True
        self._seq: dict[int, int] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    # -- the off switch -------------------------------------------------
    def disable(self, why: str) -> None:
        """Switch off for good and say so once; safe to call from anywhere."""
        with self._lock:
            if not self.enabled:
                return
            self.enabled = False
        try:
            self.writer.set_disabled()
        except Exception:  # the region may be gone; saying so is enough
            pass
        sys.stderr.write(f"xpu-diag tracer (rank {self.rank}, pid {os.getpid()}): "
                         f"switched off: {why}\n")

    # -- re-entrancy: a traced op that calls another traced op records once
    def enter(self) -> bool:
        if getattr(self._local, "busy", False):
            return False
        self._local.busy = True
        return True

    def leave(self) -> None:
        self._local.busy = False

    def busy(self) -> bool:
        """Inside a traced call on this thread (its record covers what it calls)."""
        return getattr(self._local, "busy", False)

    # -- records --------------------------------------------------------
    def begin(self, kind, name, comm_id=0, nbytes=0, comm_rank=-1, comm_size=0,
              sequenced=True, flags=0, args=0) -> Op:
        """START one op. ``flags``: the dtype bits, ``args``: the packed reduce
        op and root/peer (docs/records.md); both go into START only. Seqs
        count per (group, lane): collectives and p2p apart."""
        seq = 0
        if sequenced:
            key = (comm_id, kind)
            with self._lock:
                seq = self._seq.get(key, 0) + 1
                self._seq[key] = seq
        t0 = time.monotonic_ns()
        op_id = self.writer.start(kind, name, comm_id, seq, nbytes, args, comm_rank, comm_size, flags)
        return Op(op_id, kind, name, comm_id, seq, nbytes, comm_rank, comm_size, t0)

    def finish(self, op: Op, failed: bool = False, t_end: int | None = None) -> None:
        """Write END for ``op``, which ended at ``t_end`` (monotonic ns; now
        when None: the completion watcher writes ENDs after the fact). Never raises."""
        if not self.enabled:
            return
        try:
            if t_end is None:
                t_end = time.monotonic_ns()
            # Positional: this runs on every traced collective.
            self.writer.end(op.op_id, op.kind, op.name, t_end - op.t0, op.comm_id,
                            op.seq, op.nbytes, 0, op.comm_rank, op.comm_size, failed, t_end)
        except Exception as exc:
            self.disable(f"writing a record failed: {exc!r}")


def active() -> "Tracer | None":
    return current.tracer


def install_from_env(env=os.environ) -> "Tracer | None":
    """Create this worker's region and patch torch.distributed and host functions.

    Does nothing (returns None) unless the launcher set XPU_TIMER_SHM_DIR and
    torchrun set RANK, or when XPU_TIMER_TRACER_DISABLE=1. Never raises.
    """
    if current.tracer is not None:
        return current.tracer
    if env.get(ENV_DISABLE, "") not in ("", "0") or not env.get(ENV_SHM_DIR):
        return None
    if "RANK" not in env or env.get(ENV_OWNER_PID, str(os.getpid())) != str(os.getpid()):
        return None
    rank = _int(env.get("RANK"), -1)
    try:
        writer = RecordWriter(
            env[ENV_SHM_DIR], producer=fmt.PRODUCER_PYTHON, rank=rank,
            local_rank=_int(env.get("LOCAL_RANK"), -1),
            world_size=_int(env.get("WORLD_SIZE"), 0),
            capacity=_int(env.get(ENV_CAPACITY), fmt.DEFAULT_CAPACITY))
    except Exception as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        sys.stderr.write(f"xpu-diag tracer (rank {rank}, pid {os.getpid()}): switched off: "
                         f"cannot create its region in {env.get(ENV_SHM_DIR)}: {why}\n")
        return None
    os.environ[ENV_OWNER_PID] = str(os.getpid())
    tracer = Tracer(writer, rank)
    current.tracer = tracer
    # A forked child must not write into its parent's region.
    os.register_at_fork(after_in_child=lambda: _forget(tracer))
    from diag.tracer import collectives, device, host_funcs, import_hooks, steps
    import_hooks.when_imported("torch.distributed", lambda _m: collectives.patch(tracer))
    import_hooks.when_imported("torch.cuda", lambda m: device.install(tracer, m))
    import_hooks.when_imported("torch.optim", lambda m: steps.install(tracer, m))
    host_funcs.install(tracer, env.get(ENV_HOST_FUNCS, ""))
    return tracer


def _forget(tracer: Tracer) -> None:
    tracer.enabled = False
    current.tracer = None


def _int(text, default: int) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return default
