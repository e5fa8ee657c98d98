"""Write under a shared directory (a 1777 --timeline-path) without following
another user's links (issue 33).

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

A refusal or a failed write raises :class:`Unwritable` (an OSError) whose text
is one line naming the directory and why; :func:`say_once` prints such a line
once per process, however often the write is retried.
"""

from __future__ import annotations

import errno
import os
import stat
import threading

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


def _refuse(path: str, why: str) -> Unwritable:
    return Unwritable(errno.EPERM, f"refusing to write under {path}: {why}; nothing is written there")


def _check_dir(fd: int, path: str, uid: int, last: bool) -> None:
    st = os.fstat(fd)
    if st.st_uid != uid and (last or st.st_uid != 0):   # root's is fine on the way, not to write into
        raise _refuse(path, f"it is owned by uid {st.st_uid}, not by this user (uid {uid})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise _refuse(path, f"others may write in it (mode {stat.S_IMODE(st.st_mode):o}) and it is not "
                            f"sticky; chmod +t it or pick another --timeline-path")


def open_dir(path: str | os.PathLike, create: bool = False, mode: int = 0o755) -> int:
    """An fd (O_DIRECTORY) of ``path``, walked and checked as the module says;
    with ``create``, missing directories are made (``mode``). The caller
    closes the fd. Raises :class:`Unwritable`."""
    path = os.path.abspath(os.fspath(path))
    uid = os.geteuid()
    todo = [p for p in path.split("/") if p]
    fd, done, links = os.open("/", _DIR_FLAGS), "/", 0
    try:
        _check_dir(fd, done, uid, last=not todo)
        while todo:
            name = todo.pop(0)
            if name == ".":
                continue
            here = os.path.dirname(done) if name == ".." else os.path.join(done, name)
            nfd, target = _step(fd, name, here, path, uid, create, mode)
            if target is not None:
                links += 1
                if links > MAX_LINKS:
                    raise Unwritable(errno.ELOOP, f"cannot write in {path}: too many links")
                todo[:0] = [p for p in target.split("/") if p]
                if target.startswith("/"):
                    os.close(fd)
                    fd, done = os.open("/", _DIR_FLAGS), "/"
                continue
            os.close(fd)
            fd, done = nfd, here
            _check_dir(fd, done, uid, last=not todo)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _step(fd: int, name: str, here: str, path: str, uid: int, create: bool, mode: int) -> tuple[int, str | None]:
    """One component: (its fd, None), or (-1, the text of a link we may follow)."""
    for _ in range(3):     # made or removed by someone meanwhile: look again
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=fd), None
        except FileNotFoundError:
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
                raise _failed(exc, here, "", 0) from None
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISLNK(st.st_mode):
                raise Unwritable(errno.ENOTDIR, f"cannot write in {path}: {here} is not a directory") from None
            if st.st_uid not in (uid, 0):
                raise _refuse(here, f"it is a link owned by uid {st.st_uid}") from None
            try:
                return -1, os.readlink(name, dir_fd=fd)
            except OSError:
                continue
    raise Unwritable(errno.EAGAIN, f"cannot write in {path}: {here} keeps changing")


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
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
            os.fchmod(f.fileno(), mode)
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
