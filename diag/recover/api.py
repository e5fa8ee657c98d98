"""Recovery contracts: the on-node snapshot store, the persisted copy, restore.

Three parties share the bytes, and this module is what they agree on (no
torch here): the worker, which opts in with :class:`diag.recover.Checkpointer`
and writes its snapshots into the store; the node agent, which owns the
store's lifetime and copies its newest committed step to disk
(``--ckpt-persist-every``, and as last words on a HANG or a crash); and the
launcher, which hands both directories to the workers
(:data:`ENV_STORE_DIR`, :data:`ENV_PERSIST_DIR`). The store's and the
persisted copy's layouts, the commit rule (``meta.json`` written last, by
rename) and how a copy loads with stock torch are in docs/recovery.md.
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
