"""Persisted copies: the store's newest snapshots written to disk in
torch.distributed.checkpoint format (the agent's side), and read back (restore).

One stock DCP checkpoint per rank and step (layout in ``diag.recover.api``),
made in a temp directory beside its final name and renamed into place when
complete, so an interrupted persist (kill -9, disk full) leaves only a temp
directory that nothing reads and the next persist removes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import shutil
import stat
import tempfile
import time
import warnings

from diag.common import safe_dirs
from diag.common.atomic import write_atomic
from diag.recover import api, layout, store

_STEP_RE = re.compile(r"step-(\d{8,})")
_TMP_PREFIX = ".tmp-"
_RANK_RE = re.compile(r"rank-(\d{5,})")
_TMP_RANK_RE = re.compile(re.escape(_TMP_PREFIX) + r"rank-(\d{5,})-.*")


def step_dir(persist_dir: str, step: int) -> str:
    return os.path.join(persist_dir, api.STEP_DIR.format(step=step))


def copy_dir(persist_dir: str, step: int, rank: int) -> str:
    return os.path.join(step_dir(persist_dir, step), api.RANK_DIR.format(rank=rank))


def persist_newest(store_dir: str, persist_dir: str, keep: int = 2,
                   ranks: list[int] | None = None) -> api.PersistResult:
    """Copy each local rank's newest complete snapshot from the store to
    ``persist_dir``. The agent calls this periodically and as last words.

    Both committed slots of a rank are written (older first), so ranks one
    snapshot apart still share a step on disk. Idempotent: a step already on
    disk (same checksum) is "present" and not rewritten. Atomic per copy:
    temp directory, then rename. A snapshot whose bytes fail their checksum
    is left out (and named in ``reason``). Never raises for
    one rank's failure: the result says, rank by rank (``outcome`` "failed" and
    a one-line ``reason``). Keeps the newest ``keep`` copies of each of this
    node's ranks, and the steps the job still needs (:func:`wanted_by_the_job`),
    and removes older ones. ``ranks``: only these (default: every
    rank with a directory in the store). Blocks for the disk write; run it off
    the agent's reporting thread."""
    if keep < 1:
        raise ValueError(f"keep: {keep!r} must be at least 1")
    found = store.ranks_in(store_dir)
    wanted = sorted(found) if ranks is None else sorted(r for r in ranks if r in found)
    # Every copy of this node gets its temp directory before any is written:
    # it tells the other nodes' prune which steps this node is writing.
    started = [_RankPersist(found[rank], persist_dir, rank) for rank in wanted]

    def touch_the_rest() -> None:
        # After each copy, the copies still to write stay fresh: a temp
        # directory untouched for 10 minutes is a stale one (a killed
        # persist's) to the others, and a node's copies of a large model can
        # take longer than that.
        for one in started:
            one.touch()

    try:
        results = [one.finish(touch_the_rest) for one in started]
    finally:
        for one in started:
            one.close()
    world = next((one.world for one in started if one.world), None)
    held = set()
    if world:
        with contextlib.suppress(OSError):
            held = wanted_by_the_job(persist_dir, world, mine=set(wanted))
    with contextlib.suppress(OSError):
        prune(persist_dir, [r.rank for r in results if r.outcome in ("written", "present")], keep, held=held)
    return api.PersistResult(tuple(
        dataclasses.replace(r, steps=tuple(step for step, _ in copies(persist_dir, r.rank))) for r in results))


class _RankPersist:
    """One rank's share of a persist: its copies started (temp directories
    made) on creation, written by :meth:`finish`. Never raises: a failure is
    the rank's result."""

    def __init__(self, rdir: str, persist_dir: str, rank: int):
        self.persist_dir, self.rank = persist_dir, rank
        self.problems: list[str] = []
        self.todo: list = []
        self.world: int | None = None
        self.error: str | None = None
        try:
            refs = list(reversed(store.committed(rdir, self.problems)))   # older first: the newest renamed in last
            for ref in refs:
                target = copy_dir(persist_dir, ref.meta.step, rank)
                self.todo.append((ref, _Pending.start(target, ref.meta, rank)))
                self.world = ref.meta.world_size
        except Exception as exc:   # one rank's trouble never stops the others
            self.error = f"{type(exc).__name__}: {exc}"

    def finish(self, after_each=lambda: None) -> api.RankPersist:
        if self.error is not None:
            return api.RankPersist(self.rank, None, "failed", reason=self.error)
        newest = None
        try:
            for ref, pending in self.todo:
                outcome = _persist_slot(ref, pending, self.persist_dir, self.rank, self.problems)
                after_each()
                if outcome is not None:
                    newest = outcome
        except Exception as exc:
            return api.RankPersist(self.rank, None, "failed", reason=f"{type(exc).__name__}: {exc}")
        if newest is None:
            if self.problems:
                return api.RankPersist(self.rank, None, "failed", reason="; ".join(self.problems))
            return api.RankPersist(self.rank, None, "none")
        if newest.outcome != "failed" and self.problems:
            newest = dataclasses.replace(newest, reason="; ".join(self.problems))
        return newest

    def touch(self) -> None:
        """Refresh the temp directories of the copies not yet written."""
        for _, pending in self.todo:
            if isinstance(pending, _Pending) and pending.tmp is not None:
                with contextlib.suppress(OSError):
                    os.utime(pending.tmp)

    def close(self) -> None:
        for _, pending in self.todo:
            if isinstance(pending, _Pending):
                pending.close()


def _persist_slot(ref: api.SlotRef, pending, persist_dir: str, rank: int,
                  problems: list[str]) -> api.RankPersist | None:
    """Persist one committed slot into ``pending`` (a :class:`_Pending`, the
    copy already on disk as a RankPersist, or the exception that stopped its
    start); None if it changed or failed its checksum (said in ``problems``)."""
    if isinstance(pending, api.RankPersist):
        return pending
    target = copy_dir(persist_dir, ref.meta.step, rank)
    t0 = time.monotonic()
    try:
        if isinstance(pending, Exception):
            raise pending
        data, objects = store.copy_out(ref)      # the slot is free again before the disk write
        pending.write(ref.meta, data, objects)
    except store.SlotBusy:
        return None       # the worker is overwriting it: the other slot is the newest
    except api.CorruptSnapshot as exc:
        problems.append(str(exc))
        return None
    except Exception as exc:    # disk full, permissions, DCP refusing: this copy only
        why = _why(exc, persist_dir, ref.meta.data_bytes + ref.meta.objects_bytes)
        return api.RankPersist(rank, ref.meta.step, "failed", target,
                               reason=f"{target}: {why}; the previous copies stay")
    return api.RankPersist(rank, ref.meta.step, "written", target, bytes=ref.meta.data_bytes,
                           seconds=time.monotonic() - t0)


def _why(exc: Exception, where: str, needed: int) -> str:
    """The cause in words: torch.save reports a full disk as "unexpected pos"."""
    import resource
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        free = None
    if free is not None and free < needed:
        return f"no room ({free >> 20} MiB free, {needed >> 20} MiB needed)"
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        return f"the file size limit (ulimit -f) is {soft} bytes, {needed} needed"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}"


class _Pending:
    """One rank's snapshot being written as a DCP checkpoint at ``target``:
    its temp directory, made beside ``target`` before the bytes are read, and
    renamed to ``target`` when complete (a copy already there is replaced
    whole)."""

    def __init__(self, target: str):
        # The default persist dir lies under a shared --timeline-path: the parent
        # is walked and checked by safe_dirs (no other user's link or directory),
        # and everything below is reached through its open fd, so a name swapped
        # meanwhile redirects nothing.
        self.fd = safe_dirs.open_dir(os.path.dirname(target), create=True)
        self.parent = f"/proc/self/fd/{self.fd}"
        self.name = os.path.basename(target)
        try:
            self.tmp: str | None = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{self.name}-", dir=self.parent)
        except BaseException:
            os.close(self.fd)
            raise

    @classmethod
    def start(cls, target: str, meta: api.SnapshotMeta, rank: int):
        """A _Pending for ``target``; the copy there as a "present"
        RankPersist when it already holds these bytes; or the exception that
        stopped the start (reported as that copy's failure)."""
        have = _manifest_or_none(target)
        if have is not None and have.checksum == meta.checksum:
            return api.RankPersist(rank, meta.step, "present", target)
        try:
            return cls(target)
        except Exception as exc:
            return exc

    def write(self, meta: api.SnapshotMeta, data, objects: bytes) -> None:
        import torch.distributed.checkpoint as dcp   # the agent imports torch only to persist

        tmp, target = self.tmp, os.path.join(self.parent, self.name)
        tensors = layout.views(data, meta.tensors)
        tree = layout.build([(e.path, t) for e, t in zip(meta.tensors, tensors)]
                            + layout.load_objects(objects))
        _dcp_call(dcp.save, _dcp_keys(tree), storage_writer=dcp.FileSystemWriter(tmp))
        write_atomic(os.path.join(tmp, api.OBJECTS_FILE), objects, mode=0o600, fsync=True)
        write_atomic(os.path.join(tmp, api.MANIFEST_FILE),
                     json.dumps(meta.to_json(), indent=1).encode(), mode=0o600, fsync=True)
        old = None
        if os.path.exists(target):
            old = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}old-", dir=self.parent)
            os.rename(target, os.path.join(old, "x"))
        os.rename(tmp, target)
        self.tmp = None
        _fsync_dir(self.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def close(self) -> None:
        """Remove the temp directory if the copy was not completed."""
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _dcp_call(fn, *args, **kwargs):
    """A DCP save/load in this one process, its failure as the exception
    under it: DCP wraps it in CheckpointException, a BaseException that would
    pass every ``except Exception`` of the agent."""
    from torch.distributed.checkpoint.api import CheckpointException
    with warnings.catch_warnings():   # "assuming the intent is to save in a single process": it is
        warnings.simplefilter("ignore")
        try:
            return fn(*args, no_dist=True, **kwargs)
        except CheckpointException as exc:
            causes = [c[0] if isinstance(c, tuple) else c for c in exc.failures.values()]
            cause = next((c for c in causes if isinstance(c, BaseException)), None)
            if isinstance(cause, Exception):
                raise cause from None
            raise RuntimeError(f"torch.distributed.checkpoint failed: {causes!r}"[:300]) from None


def _dcp_keys(tree):
    """DCP wants str keys throughout (an optimizer's state is keyed by int)."""
    if isinstance(tree, dict):
        return {str(k): _dcp_keys(v) for k, v in tree.items()}
    return tree


def _fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _refused_is_corrupt():
    """safe_dirs' refusal (another user's link or file on the way) raised as
    :class:`api.CorruptSnapshot`, with its one line: the copy is skipped."""
    try:
        yield
    except safe_dirs.Unwritable as exc:
        raise api.CorruptSnapshot(str(exc)) from None


def read_manifest(path: str) -> api.SnapshotMeta:
    """The manifest of the persisted copy at ``path`` (a rank directory).
    Raises :class:`api.CorruptSnapshot` with one line naming the file and the fix.
    Read through safe_dirs: another user's link or file on the way is refused."""
    name = os.path.join(path, api.MANIFEST_FILE)
    with _refused_is_corrupt():
        raw = safe_dirs.read_file(name)
    if raw is None:
        raise api.CorruptSnapshot(f"{name}: missing; remove {path} (an older step is used) "
                                  f"or restore the file") from None
    try:
        return api.SnapshotMeta.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError):
        raise api.CorruptSnapshot(f"{name}: not a manifest; remove {path} so that the step before it is "
                                  f"restored, or start afresh with an empty --ckpt-persist-dir") from None


def _manifest_or_none(path: str) -> api.SnapshotMeta | None:
    try:
        return read_manifest(path)
    except api.CorruptSnapshot:
        return None


def copies(persist_dir: str, rank: int, say=None) -> list[tuple[int, str]]:
    """(step, path) of the rank's persisted copies, newest first (renamed
    into place: complete, though not yet checked). The directories are walked
    through safe_dirs (the default persist dir lies under a shared
    --timeline-path): another user's link or directory is left out, and
    ``say(line)`` says why once."""
    return [(step, path) for step, path, _ in walk_copies(persist_dir, rank, say)]


def walk_copies(persist_dir: str, rank: int, say=None) -> list[tuple[int, str, str]]:
    """(step, path, step directory's name), newest first; see :func:`copies`."""
    out: list[tuple[int, str, str]] = []
    mine = api.RANK_DIR.format(rank=rank)
    with _opened(persist_dir, say) as (fd, names):
        for name in names:
            match = _STEP_RE.fullmatch(name)
            if not match:
                continue
            # Opened by name, not looked up in a listing: a step directory
            # holds the copy of every rank of the job.
            with _opened_in(fd, persist_dir, name, say, names=False) as (sfd, _):
                if sfd is None:
                    continue
                with _opened_in(sfd, os.path.join(persist_dir, name), mine, say, names=False) as (rfd, _):
                    if rfd is not None:
                        out.append((int(match.group(1)), os.path.join(persist_dir, name, mine), name))
    return sorted(out, reverse=True)


def _opened(path: str, say, names: bool = True):
    """(fd, names in it) of a directory opened by safe_dirs to read in; (None, [])
    when it is missing or refused (said once through ``say``). ``names``
    False: not listed (a step directory holds every rank's copy)."""
    return _listed(lambda: safe_dirs.open_dir(path, read=True), say, (FileNotFoundError,), names=names)


def _opened_in(dir_fd: int, directory: str, name: str, say, names: bool = True):
    """As :func:`_opened`, for ``name`` in the open ``dir_fd``; a file where a
    directory was looked for is passed over without a word."""
    return _listed(lambda: safe_dirs.open_dir_in(dir_fd, directory, name), say,
                   (FileNotFoundError, NotADirectoryError), quiet=(errno.ENOTDIR,), names=names)


@contextlib.contextmanager
def _listed(open_fd, say, missing: tuple, quiet: tuple = (), names: bool = True):
    """(fd, names in it) of the directory ``open_fd()`` opens, closed on leaving;
    (None, []) when that raises one of ``missing``, or safe_dirs refuses it
    (said once through ``say`` unless its errno is in ``quiet``)."""
    try:
        fd = open_fd()
    except missing:
        yield None, []
        return
    except safe_dirs.Unwritable as exc:
        if say is not None and exc.errno not in quiet:
            safe_dirs.say_once(say, exc)
        yield None, []
        return
    try:
        yield fd, os.listdir(fd) if names else []
    finally:
        os.close(fd)


def load_copy(path: str, meta: api.SnapshotMeta) -> tuple[bytearray, bytes]:
    """Read a persisted copy back as the store holds it: ``(data, objects)``
    with ``data`` laid out as ``meta.tensors`` say. Raises
    :class:`api.CorruptSnapshot` if the bytes do not match the manifest."""
    import torch.distributed.checkpoint as dcp

    data = bytearray(meta.data_bytes)
    tensors = layout.views(data, meta.tensors)
    tree = layout.build([(e.path, t) for e, t in zip(meta.tensors, tensors)])
    try:
        # Through the checked directory's fd: what DCP opens in it is what was
        # checked, and nobody else can plant a name in a directory of ours
        # that others may not write in.
        with _refused_is_corrupt():
            fd = safe_dirs.open_dir(path, read=True)
    except OSError as exc:
        raise api.CorruptSnapshot(f"{path}: cannot be read ({exc.strerror or exc}); remove it so that the "
                                  f"step before it is restored") from None
    try:
        st = os.fstat(fd)
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise api.CorruptSnapshot(f"refusing to read under {path}: others may write in it (mode "
                                      f"{stat.S_IMODE(st.st_mode):o}); nothing there is read")
        objects = safe_dirs.read_in(fd, path, api.OBJECTS_FILE, limit=1 << 40)
        if objects is None:
            raise FileNotFoundError(errno.ENOENT, f"{api.OBJECTS_FILE} is missing")
        if meta.tensors:
            _dcp_call(dcp.load, _dcp_keys(tree), storage_reader=dcp.FileSystemReader(f"/proc/self/fd/{fd}"))
    except api.CorruptSnapshot:
        raise
    except Exception as exc:   # DCP raises its own kinds for a missing or truncated file
        raise api.CorruptSnapshot(f"{path}: cannot be read ({type(exc).__name__}: {exc}); remove it so "
                                  f"that the step before it is restored") from None
    finally:
        os.close(fd)
    store.check_bytes(path, meta, data, objects)
    return data, objects


def prune(persist_dir: str, ranks, keep: int, say=None, held: set[int] | frozenset = frozenset()) -> None:
    """Remove each of ``ranks``' copies beyond its newest ``keep``, the old
    temp directories of their interrupted persists, and step directories left
    empty. Only what :func:`copies` finds (no other user's link or directory)
    is removed, through the checked directories' fds.

    The steps in ``held`` are kept too (:func:`wanted_by_the_job`)."""
    kept: set[str] = set()
    for rank in ranks:
        with contextlib.suppress(OSError):     # one rank's trouble never stops the others
            found = walk_copies(persist_dir, rank, say)
            for step, _, name in found[keep:]:
                if step not in held:
                    remove_copy(persist_dir, name, rank, say)
            kept.update(name for _, _, name in found[:keep])
    # One listing of each kept step directory for all of the node's ranks:
    # it holds an entry for every rank of the job.
    prefixes = tuple(f"{_TMP_PREFIX}{api.RANK_DIR.format(rank=rank)}-" for rank in ranks)
    with _opened(persist_dir, say, names=False) as (fd, _):
        if fd is None:
            return
        for name in sorted(kept):
            with _opened_in(fd, persist_dir, name, say) as (sfd, inside):
                for tmp in inside:
                    if tmp.startswith(prefixes) and _stale(tmp, sfd):
                        shutil.rmtree(tmp, ignore_errors=True, dir_fd=sfd)


def wanted_by_the_job(persist_dir: str, world: int, mine=frozenset(), say=None) -> set[int]:
    """The steps whose copies every rank keeps beyond its newest, read from
    the directory every node of the job shares: the newest step all ``world``
    ranks have complete, and each newer step that a rank not in ``mine`` is
    writing (its temp directory, made before its bytes are read, younger than
    a stale one). Nodes persist on their own ticks, so a node that lags, then
    dies, may hold only steps the others are past; without these, restore
    would find no common step."""
    complete: dict[int, set[int]] = {}
    writing: set[int] = set()
    with _opened(persist_dir, say) as (fd, names):
        for name in names:
            match = _STEP_RE.fullmatch(name)
            if not match:
                continue
            step = int(match.group(1))
            with _opened_in(fd, persist_dir, name, say) as (sfd, inside):
                for entry in inside:
                    done = _RANK_RE.fullmatch(entry)
                    if done:
                        complete.setdefault(step, set()).add(int(done.group(1)))
                        continue
                    busy = _TMP_RANK_RE.fullmatch(entry)
                    if busy and int(busy.group(1)) not in mine and not _stale(entry, sfd):
                        writing.add(step)
    every = set(range(world))
    common = max((step for step, ranks in complete.items() if every <= ranks), default=-1)
    return {step for step in writing if step > common} | ({common} if common >= 0 else set())


def remove_copy(persist_dir: str, step_name: str, rank: int, say=None) -> None:
    """Remove one rank's copy in ``persist_dir/step_name`` (and the step
    directory when that leaves it empty), through the checked fds: rmtree
    with dir_fd never follows a link."""
    with _opened(persist_dir, say, names=False) as (fd, _):
        if fd is None:
            return
        with _opened_in(fd, persist_dir, step_name, say, names=False) as (sfd, _):
            if sfd is None:
                return
            shutil.rmtree(api.RANK_DIR.format(rank=rank), ignore_errors=True, dir_fd=sfd)
        with contextlib.suppress(OSError):
            os.rmdir(step_name, dir_fd=fd)


def _stale(name: str, dir_fd: int, age_s: float = 600.0) -> bool:
    """A temp directory no persist is writing any more (old enough)."""
    try:
        return time.time() - os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime > age_s
    except OSError:
        return False
