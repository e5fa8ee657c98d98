"""Write and read under a shared directory (a 1777 --timeline-path) without
following another user's links.

Every directory on the way is opened with ``openat(O_DIRECTORY|O_NOFOLLOW)``
relative to the one before it, from ``/``, and checked on its open fd
(fstat), so what is checked is what is written into, whatever is renamed
meanwhile. The rules, on hosts where ``fs.protected_symlinks`` is 0 too:

- A directory on the way is owned by this user or root, and if others may
  write in it, it is sticky (/tmp): nobody else can then rename or replace
  what is ours in it.
- A link on the way is followed only when this user or root owns it.
- The directory written into is this user's own.
- A file is made as a temp file (``O_CREAT|O_EXCL|O_NOFOLLOW``) and renamed
  into place within the same directory fd: a link planted at its name is
  replaced, never followed.

- Reading (:func:`read_file`, :func:`read_in`, ``open_dir(read=True)``) walks
  the same way; the directory read in may be root's too, and the file is
  opened with O_NOFOLLOW and is this user's or root's. Another user's link,
  directory or file is refused (:class:`Unreadable`); a missing one reads as
  None, so a reader treats a refusal after its one line as a missing file.

A refusal or a failed write raises :class:`Unwritable` (an OSError) whose text
is one line naming the directory and why; :func:`say_once` prints such a line
once per process, however often the write is retried.
"""

from __future__ import annotations

import errno
import os
import stat
import threading

from diag.common.atomic import write_fd

MAX_LINKS = 40        # the kernel's own bound on links in one lookup
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class Unwritable(OSError):
    """A directory refused or a file that could not be written; ``str()`` is one line."""

    def __init__(self, err: int, line: str) -> None:
        super().__init__(err, line)
        self.line = line

    def __str__(self) -> str:
        return self.line


class Unreadable(Unwritable):
    """A directory or file refused for reading (another user's link, directory
    or file on the way); ``str()`` is one line. A subclass of Unwritable so
    that one ``except`` and :func:`say_once` serve both."""


def _refuse(path: str, why: str, read: bool = False) -> Unwritable:
    if read:
        return Unreadable(errno.EPERM, f"refusing to read under {path}: {why}; nothing there is read")
    return Unwritable(errno.EPERM, f"refusing to write under {path}: {why}; nothing is written there")


def _check_dir(fd: int, path: str, uid: int, last: bool, read: bool = False) -> None:
    st = os.fstat(fd)
    # root's is fine on the way, not to write into; to read from, root's is as good as ours
    if st.st_uid != uid and (last and not read or st.st_uid != 0):
        raise _refuse(path, f"it is owned by uid {st.st_uid}, not by this user (uid {uid})", read)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise _refuse(path, f"others may write in it (mode {stat.S_IMODE(st.st_mode):o}) and it is not "
                            f"sticky; chmod +t it or pick another --timeline-path", read)


def open_dir(path: str | os.PathLike, create: bool = False, mode: int = 0o755, read: bool = False) -> int:
    """An fd (O_DIRECTORY) of ``path``, walked and checked as the module says;
    with ``create``, missing directories are made (``mode``). The caller
    closes the fd. Raises :class:`Unwritable`. With ``read`` (to read in it,
    not write), the directory itself may be root's too; a missing one raises
    FileNotFoundError and a refused one :class:`Unreadable`."""
    path = os.path.abspath(os.fspath(path))
    uid = os.geteuid()
    todo = [p for p in path.split("/") if p]
    fd, done, links = os.open("/", _DIR_FLAGS), "/", 0
    try:
        _check_dir(fd, done, uid, not todo, read)
        while todo:
            name = todo.pop(0)
            if name == ".":
                continue
            here = os.path.dirname(done) if name == ".." else os.path.join(done, name)
            nfd, target = _step(fd, name, here, path, uid, create, mode, read)
            if target is not None:
                links += 1
                if links > MAX_LINKS:
                    raise (Unreadable if read else Unwritable)(errno.ELOOP, f"cannot {_verb(read)} {path}: "
                                                                            f"too many links")
                todo[:0] = [p for p in target.split("/") if p]
                if target.startswith("/"):
                    os.close(fd)
                    fd, done = os.open("/", _DIR_FLAGS), "/"
                continue
            os.close(fd)
            fd, done = nfd, here
            _check_dir(fd, done, uid, not todo, read)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _verb(read: bool) -> str:
    return "read in" if read else "write in"


def _step(fd: int, name: str, here: str, path: str, uid: int, create: bool, mode: int,
          read: bool = False) -> tuple[int, str | None]:
    """One component: (its fd, None), or (-1, the text of a link we may follow)."""
    err = Unreadable if read else Unwritable
    for _ in range(3):     # made or removed by someone meanwhile: look again
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=fd), None
        except FileNotFoundError:
            if read:
                raise
            if not create:
                raise Unwritable(errno.ENOENT, f"cannot write in {path}: {here} does not exist") from None
            try:
                os.mkdir(name, mode, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise _failed(exc, os.path.dirname(here), f"directory {name}", 4096) from None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                if read:
                    raise Unreadable(exc.errno or errno.EIO, f"cannot read in {path}: {here}: "
                                                             f"{exc.strerror or exc}") from None
                raise _failed(exc, here, "", 0) from None
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISLNK(st.st_mode):
                raise err(errno.ENOTDIR, f"cannot {_verb(read)} {path}: {here} is not a directory") from None
            if st.st_uid not in (uid, 0):
                raise _refuse(here, f"it is a link owned by uid {st.st_uid}", read) from None
            try:
                return -1, os.readlink(name, dir_fd=fd)
            except OSError:
                continue
    raise err(errno.EAGAIN, f"cannot {_verb(read)} {path}: {here} keeps changing")


def _failed(exc: OSError, directory: str, name: str, size: int) -> Unwritable:
    if exc.errno in _NO_SPACE:
        what = "no space left" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        return Unwritable(exc.errno, f"cannot write {name or 'in it'} in {directory}: {what} "
                                     f"({size:,} bytes needed)")
    return Unwritable(exc.errno or errno.EIO, f"cannot write {name + ' in ' if name else 'in '}{directory}: "
                                              f"{exc.strerror or exc}")


def write_in(dir_fd: int, directory: str, name: str, data: bytes, mode: int = 0o644,
             fsync: bool = False) -> None:
    """Replace ``name`` in the open directory with ``data``: a temp file made
    with O_EXCL|O_NOFOLLOW, then renamed within ``dir_fd``. ``directory`` is
    for the messages. Raises :class:`Unwritable`; the temp file is removed."""
    tmp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dir_fd)
    except FileExistsError:   # a leftover of a killed writer with our pid, or planted: start over
        os.unlink(tmp, dir_fd=dir_fd)
        return write_in(dir_fd, directory, name, data, mode, fsync)
    except OSError as exc:
        raise _failed(exc, directory, name, len(data)) from None
    try:
        write_fd(fd, data, mode, fsync)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise _failed(exc, directory, name, len(data)) from None
        raise


def write_file(path: str | os.PathLike, data: bytes, mode: int = 0o644, fsync: bool = False,
               create_dirs: bool = False) -> None:
    """:func:`write_in` the directory of ``path``, opened by :func:`open_dir`."""
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    fd = open_dir(directory, create=create_dirs)
    try:
        write_in(fd, directory, name, data, mode, fsync)
    finally:
        os.close(fd)


def make_dir(path: str | os.PathLike, mode: int = 0o755) -> None:
    """Make the directory ``path`` (not its parents), in a parent that
    :func:`open_dir` made or checked. Raises FileExistsError when a name
    (a directory, a file or a link) is there, else :class:`Unwritable`."""
    parent, name = os.path.split(os.path.abspath(os.fspath(path)))
    fd = open_dir(parent, create=True)
    try:
        os.mkdir(name, mode, dir_fd=fd)
    except FileExistsError:
        raise
    except OSError as exc:
        raise _failed(exc, parent, f"directory {name}", 4096) from None
    finally:
        os.close(fd)


def open_dir_in(dir_fd: int, directory: str, name: str) -> int:
    """An fd of the directory ``name`` in the open ``dir_fd`` (``directory``
    for the messages), checked to read in as :func:`open_dir` with ``read``
    checks it. Raises FileNotFoundError or :class:`Unreadable`."""
    here = os.path.join(directory, name)
    fd, target = _step(dir_fd, name, here, here, os.geteuid(), False, 0, read=True)
    if target is not None:   # our own or root's link: walk it whole
        return open_dir(os.path.join(directory, target), read=True)
    try:
        _check_dir(fd, here, os.geteuid(), True, read=True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_in(dir_fd: int, directory: str, name: str, limit: int = 64 << 20, _links: int = 0) -> bytes | None:
    """The bytes of the regular file ``name`` in the open ``dir_fd``, opened
    with O_NOFOLLOW; None when there is none (as for a missing file). A link
    there is followed only when this user or root owns it. Raises
    :class:`Unreadable` (one line) for another user's link or file, a file
    that is not a regular one, or one over ``limit`` bytes."""
    uid, here = os.geteuid(), os.path.join(directory, name)
    try:
        # O_NONBLOCK: a FIFO planted at the name must not block the reader
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise Unreadable(exc.errno or errno.EIO, f"cannot read {here}: {exc.strerror or exc}") from None
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            target = os.readlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        if st.st_uid not in (uid, 0):
            raise _refuse(here, f"it is a link owned by uid {st.st_uid}", read=True) from None
        if _links >= MAX_LINKS:
            raise Unreadable(errno.ELOOP, f"cannot read {here}: too many links") from None
        return read_file(os.path.join(directory, target), limit, _links + 1)
    try:
        st = os.fstat(fd)
        if st.st_uid not in (uid, 0):
            raise _refuse(here, f"it is owned by uid {st.st_uid}, not by this user (uid {uid})", read=True)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(errno.EINVAL, f"refusing to read {here}: it is not a regular file")
        if st.st_size > limit:
            raise Unreadable(errno.EFBIG, f"refusing to read {here}: {st.st_size:,} bytes, over {limit:,}")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(min(limit, st.st_size + (1 << 20)))   # room for what was appended since fstat
    except Unreadable:
        raise
    except OSError as exc:
        raise Unreadable(exc.errno or errno.EIO, f"cannot read {here}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_file(path: str | os.PathLike, limit: int = 64 << 20, _links: int = 0) -> bytes | None:
    """:func:`read_in` the directory of ``path``, opened by :func:`open_dir`
    to read in: None when the file or a directory on the way is missing,
    :class:`Unreadable` (one line) when another user's link, directory or
    file is on the way."""
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    try:
        fd = open_dir(directory, read=True)
    except FileNotFoundError:
        return None
    try:
        return read_in(fd, directory, name, limit, _links)
    finally:
        os.close(fd)


_said: set[str] = set()
_said_lock = threading.Lock()
MAX_SAID = 1024


def say_once(say, exc: BaseException) -> None:
    """``say(line)`` for a failed write, once per distinct line (a hang.json
    rewritten every tick fails every tick)."""
    line = str(exc) if isinstance(exc, Unwritable) else f"{type(exc).__name__}: {exc}".splitlines()[0]
    with _said_lock:
        if line in _said:
            return
        if len(_said) < MAX_SAID:
            _said.add(line)
    say(line)
