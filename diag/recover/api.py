"""Recovery contracts: the on-node snapshot store, the persisted copy, restore.

Three parties share the bytes; this module is what they agree on (no torch here).

* The **worker** (train.py) opts in with :class:`diag.recover.Checkpointer`::

      ckpt = Checkpointer()                          # store/persist dirs from the environment
      ckpt.register(model=model, optim=optimizer, sched=scheduler)   # replicated or sharded
      ckpt.register_local(rng=RNGState(), progress=progress)         # every rank its own
      start = ckpt.restore() or 0                    # newest step every rank has, else None
      for step in range(start, steps):
          ...; optimizer.step(); progress["step"] = step + 1
          ckpt.save(step + 1)                        # async; never raises, never blocks on I/O

  ``save(step)`` names the number of optimizer steps *completed*, so the
  restored value is the step to run next. DDP (``replicated=True``, the
  default when the model is not sharded): only the holder rank (global rank 0)
  keeps what ``register`` names; every rank keeps what ``register_local``
  names. FSDP2 / sharded (``replicated=False``): every rank keeps its shard.

* The **node agent** (launcher process) owns the store's lifetime and copies
  it to disk: :func:`diag.recover.store.create_store_dir` at launch (before
  the first worker; the directory outlives every torchrun restart),
  :func:`diag.recover.store.remove_store_dir` when the launcher exits, and
  :func:`diag.recover.persist.persist_newest` periodically
  (``--ckpt-persist-every``, see :class:`PersistSchedule`) and as **last
  words** on a HANG or a crash, before the workers are killed. The hung
  workers do nothing: the newest committed snapshot is already in the store.

* The launcher passes both directories to the workers in the environment:
  ``XPU_TIMER_CKPT_DIR`` (:data:`ENV_STORE_DIR`, the node's store) and
  ``XPU_TIMER_CKPT_PERSIST_DIR`` (:data:`ENV_PERSIST_DIR`, the disk copy,
  shared by every node of the job). A worker with neither set keeps nothing
  and says so once.

Store layout (tmpfs, ``/dev/shm`` by default; survives the worker, not the node)::

    <store_dir>/                     0700, made by create_store_dir
      rank-00003/                    one per global rank, made by that worker
        slot-0/ slot-1/              double buffer
          data                       the tensors' bytes, 64-byte aligned (mmap)
          objects.pkl                the non-tensor leaves (pickle)
          meta.json                  SnapshotMeta; written LAST (temp + rename):
                                     its presence is the commit marker
          lock                       flock: the writer holds LOCK_EX while the
                                     slot is invalid; a reader holds LOCK_SH

A writer unlinks ``meta.json`` before touching a slot, so a slot that a
killed process left half-written has no meta and is never read. The newest
slot with a meta whose checksum matches is the rank's snapshot.

Persisted layout (any filesystem; one stock DCP checkpoint per rank)::

    <persist_dir>/step-00000037/rank-00003/    renamed into place when complete
        .metadata, __0_0.distcp                torch.distributed.checkpoint (no_dist)
        manifest.json                          Manifest: step, world size, rank, checksum

``dcp.load(sd, checkpoint_id=".../step-00000037/rank-00000", no_dist=True)``
loads one with stock torch; the state dict's keys are the names given to
``register``/``register_local`` (``{"model": ..., "optim": ..., "rng": ...}``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from diag.common import envnames

# Where the launcher tells the workers the store and the disk copy are.
ENV_STORE_DIR = envnames.CKPT_DIR
ENV_PERSIST_DIR = envnames.CKPT_PERSIST_DIR
ENV_DISABLE = envnames.CKPT_DISABLE

FORMAT_VERSION = 1
CHECKSUM_ALGO = "sum64e-v1"      # diag.recover.checksum: a 64-bit word sum per tensor, combined
SLOTS = 2
ALIGN = 64

RANK_DIR = "rank-{rank:05d}"
SLOT_DIR = "slot-{slot}"
STEP_DIR = "step-{step:08d}"
META_FILE = "meta.json"
DATA_FILE = "data"
OBJECTS_FILE = "objects.pkl"
LOCK_FILE = "lock"
MANIFEST_FILE = "manifest.json"

# One key path into a nested state dict: ("optim", "state", 0, "exp_avg").
# str and int keys only (what model and optimizer state dicts use).
Path = tuple  # tuple[str | int, ...]


class RecoverError(RuntimeError):
    """Recovery cannot go on; the message is one user-facing line that names
    the file or setting at fault and the fix."""


class StoreUnavailable(RecoverError):
    """The store cannot be used (no directory, tmpfs full, not writable). The
    worker switches snapshots off after saying this once; training goes on."""


class CorruptSnapshot(RecoverError):
    """A committed snapshot or persisted copy whose checksum, manifest or
    files do not match. It is skipped (an older one is used) and named."""


class RestoreMismatch(RecoverError):
    """What is stored does not fit this job: another world size, another set
    of registered names, a shard of another shape. Restore stops with one line
    naming the file and the fix (same world size, or remove the directory)."""


@dataclasses.dataclass(frozen=True)
class TensorEntry:
    """Where one tensor leaf lives in a slot's ``data`` file.

    ``dtensor`` is True for a DTensor (FSDP2) whose local shard was stored;
    restore copies it back into the local shard of the live DTensor."""

    path: Path
    dtype: str            # "float32", "bfloat16" ... (torch dtype name without "torch.")
    shape: tuple[int, ...]
    offset: int           # bytes from the start of ``data``; ALIGN-aligned
    nbytes: int
    dtensor: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"path": list(self.path), "dtype": self.dtype, "shape": list(self.shape),
                "offset": self.offset, "nbytes": self.nbytes, "dtensor": self.dtensor}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "TensorEntry":
        return cls(tuple(raw["path"]), str(raw["dtype"]), tuple(int(x) for x in raw["shape"]),
                   int(raw["offset"]), int(raw["nbytes"]), bool(raw.get("dtensor", False)))


@dataclasses.dataclass(frozen=True)
class SnapshotMeta:
    """The commit record of one snapshot (a slot's ``meta.json``, and the
    heart of a persisted ``manifest.json``).

    Invariant: ``checksum`` is :data:`CHECKSUM_ALGO` over the bytes of each
    entry of ``tensors`` in ``data`` then ``objects.pkl`` (computed from the
    source tensors on the device); a snapshot whose bytes disagree is never
    restored."""

    step: int
    rank: int
    world_size: int
    checksum: str
    data_bytes: int
    objects_bytes: int
    tensors: tuple[TensorEntry, ...]
    names: tuple[str, ...]            # the registered names this rank stored, sorted
    replicated: bool                  # DDP: the holder's shared state is broadcast on restore
    holder: bool                      # this rank stored the shared (register) state
    created: float                    # time.time() at commit
    version: int = FORMAT_VERSION
    algo: str = CHECKSUM_ALGO

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["tensors"] = [t.to_json() for t in self.tensors]
        out["names"] = list(self.names)
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "SnapshotMeta":
        """Raises KeyError/TypeError/ValueError on a malformed record (the
        caller names the file)."""
        return cls(step=int(raw["step"]), rank=int(raw["rank"]), world_size=int(raw["world_size"]),
                   checksum=str(raw["checksum"]), data_bytes=int(raw["data_bytes"]),
                   objects_bytes=int(raw["objects_bytes"]),
                   tensors=tuple(TensorEntry.from_json(t) for t in raw["tensors"]),
                   names=tuple(str(n) for n in raw["names"]), replicated=bool(raw["replicated"]),
                   holder=bool(raw["holder"]), created=float(raw["created"]),
                   version=int(raw.get("version", FORMAT_VERSION)), algo=str(raw.get("algo", CHECKSUM_ALGO)))


@dataclasses.dataclass(frozen=True)
class SlotRef:
    """A committed snapshot in the store: its directory and its meta."""

    path: str
    meta: SnapshotMeta


@dataclasses.dataclass(frozen=True)
class RankPersist:
    """What persist did for one local rank.

    Both committed slots are persisted (older first): ranks can be one
    snapshot apart when a job stops, and restore needs a step they all have.
    ``outcome`` is about the newest: "written" (a new copy), "present" (that
    step was already on disk: nothing to do), "none" (the rank has no committed
    snapshot) or "failed" (``reason`` says why in one line; previous copies stay)."""

    rank: int
    step: int | None            # the newest committed step of the rank (what last words are about)
    outcome: str
    path: str | None = None
    reason: str = ""
    bytes: int = 0              # written by this call
    seconds: float = 0.0
    steps: tuple[int, ...] = ()  # every step of this rank on disk after the call, newest first


@dataclasses.dataclass(frozen=True)
class PersistResult:
    """What one :func:`diag.recover.persist.persist_newest` call did, rank by rank."""

    ranks: tuple[RankPersist, ...]

    @property
    def ok(self) -> bool:
        """No rank failed (ranks with no snapshot yet are not failures)."""
        return all(r.outcome != "failed" for r in self.ranks)

    @property
    def newest_step(self) -> int | None:
        """The newest step every local rank now has on disk, or None."""
        if not self.ranks:
            return None
        common = set(self.ranks[0].steps).intersection(*(r.steps for r in self.ranks[1:]))
        return max(common) if common else None

    def summary(self) -> str:
        """One line for the launcher's log."""
        parts = [f"rank {r.rank}: {r.outcome}" + (f" step {r.step}" if r.step is not None else "")
                 + (f" ({r.reason})" if r.reason else "") for r in self.ranks]
        return "; ".join(parts) if parts else "no rank has a snapshot"


@dataclasses.dataclass(frozen=True)
class PersistSchedule:
    """When the agent persists between last words: every ``every_steps``
    committed steps and/or every ``every_s`` seconds (either may be None; both
    None: only last words). Pure; the agent calls :meth:`due` on its tick."""

    every_steps: int | None = None
    every_s: float | None = None

    def __post_init__(self):
        if self.every_steps is not None and self.every_steps < 1:
            raise ValueError(f"--ckpt-persist-every: {self.every_steps!r} steps must be at least 1")
        if self.every_s is not None and not self.every_s > 0:
            raise ValueError(f"--ckpt-persist-every: {self.every_s!r} seconds must be positive")

    def due(self, newest_step: int | None, last_step: int | None, now: float, last_time: float) -> bool:
        """True when a persist should run now: a newer step than the last
        persisted one exists and the step or time interval has passed."""
        if newest_step is None or (last_step is not None and newest_step <= last_step):
            return False
        if self.every_steps is not None and (last_step is None or newest_step - last_step >= self.every_steps):
            return True
        return self.every_s is not None and now - last_time >= self.every_s


@dataclasses.dataclass(frozen=True)
class RestoreResult:
    """What :meth:`Checkpointer.restore` did on this rank."""

    step: int | None            # the step restored (the next step to run); None: fresh start
    source: str                 # "memory", "disk", "holder" (broadcast from the holder) or "none"
    path: str | None            # the slot or persisted directory read
    seconds: float
    bytes: int
