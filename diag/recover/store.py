"""The node's snapshot store: per-rank double-buffered slots in tmpfs.

The layout and the commit rule are written down in ``diag.recover.api``. This
module is the only code that touches the slot files: the agent reads them
(:func:`committed`, :func:`reading`), a worker writes them (:class:`SlotWriter`).
No torch here: the agent's side needs none, and the writer hands out plain
``mmap`` buffers that the worker wraps.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import mmap
import os
import re
import tempfile
import time

from diag.common import owned_dirs
from diag.common.atomic import probe_writable_dir, write_atomic
from diag.recover import api
from diag.recover import checksum

_RANK_RE = re.compile(r"rank-(\d{5,})")


def create_store_dir(job_id: str, node_rank: int, base: str | None = None) -> str:
    """Make this node's store (0700) and return its path, for
    ``XPU_TIMER_CKPT_DIR``. Called by the launcher once per launch, before
    any worker starts; it outlives torchrun's restarts, so a restarted worker
    finds what the killed one committed. ``base``: /dev/shm where writable,
    else the temp directory (then snapshots cost page-cache writes).
    Raises :class:`api.StoreUnavailable` (one line) when none can be made."""
    if base is None:
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    safe_job = re.sub(r"[^A-Za-z0-9._-]", "_", str(job_id))[:64] or "job"
    try:
        owned_dirs.sweep(base)   # stores a killed launcher left: gigabytes of tmpfs
        path = owned_dirs.make(f"{owned_dirs.PREFIX}ckpt-{safe_job}-n{int(node_rank)}-", base)
        probe_writable_dir(path)
    except OSError as exc:
        raise api.StoreUnavailable(
            f"snapshot store: cannot make a directory in {base or tempfile.gettempdir()} "
            f"({exc.strerror or exc}); free space there or set TMPDIR") from None
    return path


def remove_store_dir(path: str) -> None:
    """Remove the store (the launcher, when it exits: the job is over or the
    node goes). Never raises."""
    owned_dirs.remove(path)


def rank_dir(store_dir: str, rank: int) -> str:
    return os.path.join(store_dir, api.RANK_DIR.format(rank=rank))


def slot_dir(rdir: str, slot: int) -> str:
    return os.path.join(rdir, api.SLOT_DIR.format(slot=slot))


def ranks_in(store_dir: str) -> dict[int, str]:
    """The ranks with a directory in the store: {rank: path}."""
    try:
        names = os.listdir(store_dir)
    except OSError:
        return {}
    out = {}
    for name in names:
        match = _RANK_RE.fullmatch(name)
        if match:
            out[int(match.group(1))] = os.path.join(store_dir, name)
    return dict(sorted(out.items()))


def read_meta(path: str) -> api.SnapshotMeta | None:
    """The meta of the slot at ``path``, None if it has none (never written,
    or being written). Raises :class:`api.CorruptSnapshot` naming the file."""
    name = os.path.join(path, api.META_FILE)
    try:
        with open(name, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise api.CorruptSnapshot(f"{name}: unreadable ({exc.strerror}); it is skipped") from None
    try:
        return api.SnapshotMeta.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise api.CorruptSnapshot(f"{name}: not a snapshot record ({exc!r}); it is skipped") from None


def committed(rdir: str, problems: list[str] | None = None) -> list[api.SlotRef]:
    """The committed slots of one rank, newest step first. A malformed meta
    is left out and its line appended to ``problems``."""
    out = []
    for slot in range(api.SLOTS):
        path = slot_dir(rdir, slot)
        try:
            meta = read_meta(path)
        except api.CorruptSnapshot as exc:
            if problems is not None:
                problems.append(str(exc))
            continue
        if meta is not None:
            out.append(api.SlotRef(path, meta))
    out.sort(key=lambda ref: (ref.meta.step, ref.meta.created), reverse=True)
    return out


_UNKNOWN = object()


def render(meta: api.SnapshotMeta, tensors_json: str) -> bytes:
    """``meta`` as its meta.json, with the tensor list already rendered
    (``json.dumps([t.to_json() for t in meta.tensors])``): ~600 entries cost
    a millisecond or two of the snapshot thread's GIL at every step otherwise."""
    head = meta.to_json()
    del head["tensors"]
    return (json.dumps(head)[:-1] + ', "tensors": ' + tensors_json + "}").encode()


class SlotBusy(Exception):
    """The slot is locked by the other side; pick another or try later."""


@contextlib.contextmanager
def _flock(path: str, how: int):
    fd = os.open(os.path.join(path, api.LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SlotBusy(path) from None
        yield fd
    finally:
        os.close(fd)   # releases the lock


@contextlib.contextmanager
def reading(ref: api.SlotRef, verify: bool = True):
    """Hold ``ref`` against the writer and yield ``(data, objects)``: a
    copy-on-write mapping of its data (a bytes-like object; writable, so torch
    can wrap it, but writes never reach the file) and the pickled objects.
    Raises :class:`SlotBusy` if the writer has it or it changed since listed,
    :class:`api.CorruptSnapshot` if its bytes disagree with its checksum."""
    with _flock(ref.path, fcntl.LOCK_SH):
        meta = read_meta(ref.path)
        if meta != ref.meta:
            raise SlotBusy(ref.path)
        data_name = os.path.join(ref.path, api.DATA_FILE)
        try:
            with open(os.path.join(ref.path, api.OBJECTS_FILE), "rb") as f:
                objects = f.read()
            # a rank that keeps no tensors (DDP, not the holder, nothing local) has no data file
            fd = os.open(data_name, os.O_RDONLY) if meta.data_bytes else None
        except OSError as exc:
            raise api.CorruptSnapshot(f"{ref.path}: {exc.filename and os.path.basename(exc.filename)}: "
                                      f"{exc.strerror}; the snapshot is skipped") from None
        data = bytearray()
        if fd is not None:
            try:
                if os.fstat(fd).st_size < meta.data_bytes:
                    raise api.CorruptSnapshot(f"{data_name}: shorter than its meta says; the snapshot is skipped")
                data = mmap.mmap(fd, meta.data_bytes, access=mmap.ACCESS_COPY)
            finally:
                os.close(fd)
        if verify:
            check_bytes(ref.path, meta, data, objects)
        # Not closed here: torch.frombuffer views keep a reference to the
        # mapping but no buffer export, so close() would unmap pages a live
        # tensor still points at. The last reference unmaps it.
        yield data, objects


def copy_out(ref: api.SlotRef) -> tuple[bytearray, bytes]:
    """A private copy of a committed slot: ``(data, objects)``, checked. The
    slot is held only while its bytes are copied (tmpfs to memory, GB/s), not
    while the caller writes them to disk: a worker whose next snapshot needs
    this slot skips one for that long only. Raises as :func:`reading`."""
    with _flock(ref.path, fcntl.LOCK_SH):
        meta = read_meta(ref.path)
        if meta != ref.meta:
            raise SlotBusy(ref.path)
        data = bytearray(meta.data_bytes)
        try:
            with open(os.path.join(ref.path, api.OBJECTS_FILE), "rb") as f:
                objects = f.read()
            if meta.data_bytes:
                got, view = 0, memoryview(data)
                with open(os.path.join(ref.path, api.DATA_FILE), "rb", buffering=0) as f:
                    while got < meta.data_bytes:          # one read() returns at most ~2 GiB
                        n = f.readinto(view[got:])
                        if not n:
                            break
                        got += n
                if got != meta.data_bytes:
                    raise api.CorruptSnapshot(f"{ref.path}: {api.DATA_FILE} is shorter than its meta says; "
                                              f"the snapshot is skipped")
        except OSError as exc:
            raise api.CorruptSnapshot(f"{ref.path}: {exc.strerror}; the snapshot is skipped") from None
    check_bytes(ref.path, meta, data, objects)
    return data, objects


def check_bytes(where: str, meta: api.SnapshotMeta, data, objects: bytes) -> None:
    """Raise :class:`api.CorruptSnapshot` unless the bytes match ``meta``."""
    if meta.algo != api.CHECKSUM_ALGO or meta.version != api.FORMAT_VERSION:
        raise api.CorruptSnapshot(f"{where}: format {meta.version}/{meta.algo} is not "
                                  f"{api.FORMAT_VERSION}/{api.CHECKSUM_ALGO}; it is skipped")
    if len(objects) != meta.objects_bytes:
        raise api.CorruptSnapshot(f"{where}: {api.OBJECTS_FILE} is {len(objects)} bytes, its meta says "
                                  f"{meta.objects_bytes}; the snapshot is skipped")
    got = checksum.of_slot(data, meta.tensors, objects)
    if got != meta.checksum:
        raise api.CorruptSnapshot(f"{where}: checksum {got} is not {meta.checksum}; "
                                  f"the snapshot is skipped")


class SlotWriter:
    """One rank's writer (the worker's background thread). Not thread-safe:
    one thread writes. Usage: ``slot, buf = w.begin(nbytes)`` (the slot is
    invalid from here on), fill ``buf``, then ``w.commit(meta, objects)`` or
    ``w.abort()``. ``buf`` is a shared mapping of the slot's data file; it
    stays valid until the next :meth:`begin` with another size or :meth:`close`.
    """

    def __init__(self, store_dir: str, rank: int):
        self.dir = rank_dir(store_dir, rank)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self._maps: dict[int, tuple[int, mmap.mmap]] = {}
        self._open: tuple[int, int] | None = None     # (slot, lock fd) while writing
        self._newest = _UNKNOWN                        # the slot holding the newest commit

    def pick(self) -> int:
        """The slot to overwrite: never the newest committed one (read from
        the metas once, then known: this writer is the rank's only one)."""
        if self._newest is _UNKNOWN:
            refs = committed(self.dir)
            self._newest = (next(s for s in range(api.SLOTS) if slot_dir(self.dir, s) == refs[0].path)
                            if refs else None)
        return 0 if self._newest is None else (self._newest + 1) % api.SLOTS

    def begin(self, nbytes: int) -> tuple[int, mmap.mmap | None]:
        """Invalidate the slot :meth:`pick` chose and return it with a buffer
        of ``nbytes``. Raises :class:`SlotBusy` while the agent reads that
        slot, :class:`api.StoreUnavailable` when tmpfs has no room (the space
        is reserved up front: a write into an unbacked tmpfs page is SIGBUS)."""
        slot = self.pick()
        path = slot_dir(self.dir, slot)
        os.makedirs(path, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(path, api.LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SlotBusy(path) from None
        self._open = (slot, fd)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(path, api.META_FILE))   # from here the slot is invalid
            return slot, self._map(slot, nbytes)
        except BaseException:
            self.abort()
            raise

    def _map(self, slot: int, nbytes: int) -> mmap.mmap | None:
        have = self._maps.get(slot)
        if have is not None and have[0] == nbytes:
            return have[1]
        self.release_map(slot)
        if nbytes == 0:
            return None
        name = os.path.join(slot_dir(self.dir, slot), api.DATA_FILE)
        fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, 0)
            try:
                os.posix_fallocate(fd, 0, nbytes)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                    raise api.StoreUnavailable(
                        f"snapshot store {self.dir}: no room for {nbytes >> 20} MiB "
                        f"({exc.strerror}); snapshots are off. Make /dev/shm larger "
                        f"(docker --shm-size) or register less state") from None
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.ftruncate(fd, nbytes)
            buf = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._maps[slot] = (nbytes, buf)
        return buf

    def mapping(self, slot: int) -> mmap.mmap | None:
        have = self._maps.get(slot)
        return have[1] if have else None

    def release_map(self, slot: int) -> None:
        """Forget a slot's mapping; it is unmapped when the last view of it
        goes (closing it under a live view would leave that view dangling)."""
        self._maps.pop(slot, None)

    def commit(self, meta: api.SnapshotMeta, objects: bytes, rendered: bytes | None = None) -> str:
        """Write the objects then the meta (the commit marker), release the
        slot; returns its path. ``rendered``: the meta as JSON already (the
        caller caches the tensor list's part)."""
        if self._open is None:
            raise RuntimeError("commit without begin")
        slot, _ = self._open
        path = slot_dir(self.dir, slot)
        try:
            with open(os.path.join(path, api.OBJECTS_FILE), "wb") as f:
                f.write(objects)
            write_atomic(os.path.join(path, api.META_FILE),
                         rendered if rendered is not None else json.dumps(meta.to_json()).encode(), mode=0o600)
            self._newest = slot
        finally:
            self.abort()
        return path

    def abort(self) -> None:
        """Release the slot (left invalid unless :meth:`commit` wrote its meta)."""
        if self._open is not None:
            os.close(self._open[1])
            self._open = None

    def close(self) -> None:
        self.abort()
        for slot in list(self._maps):
            self.release_map(slot)


def newest_committed(store_dir: str, rank: int) -> api.SlotRef | None:
    """The rank's newest committed slot (meta only; not verified)."""
    refs = committed(rank_dir(store_dir, rank))
    return refs[0] if refs else None


def now() -> float:
    return time.time()
