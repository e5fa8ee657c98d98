"""Write a whole file or nothing: temp file in the same directory, then rename."""

from __future__ import annotations

import os
import tempfile


def write_atomic(path: str | os.PathLike, data: bytes, mode: int = 0o644, fsync: bool = False) -> None:
    """Replace ``path`` with ``data``; a reader sees the old file or the new
    one, never half of one. The temp file is removed on any failure.
    ``fsync`` also survives a power cut (fault lists a scheduler acts on)."""
    directory, name = os.path.split(os.fspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory or ".")
    try:
        write_fd(fd, data, mode, fsync)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_fd(fd: int, data: bytes, mode: int, fsync: bool) -> None:
    """Write ``data`` to the new temp file ``fd``, give it ``mode`` and close
    it (always); the caller renames it into place. Shared by write_atomic and
    safe_dirs.write_in, which differ only in how they make and name the temp
    file. Raises OSError."""
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
        os.fchmod(f.fileno(), mode)


def output_file_problem(option: str, path: str, example: str, give: str = "a file path") -> str | None:
    """Why the file ``path``, given as ``option``, could not be written: it is
    a directory (then the line suggests ``example`` in it, as ``give``), or its
    directory is missing or not writable; None when neither. Checked before a
    run starts, so that a bad path is said at once, not after the work."""
    if os.path.isdir(path):
        return f"{option}: {path!r} is a directory; give {give} such as {os.path.join(path, example)!r}"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        return f"{option}: directory {parent!r} does not exist or is not writable"
    return None


def probe_writable_dir(path: str | os.PathLike) -> None:
    """Create ``path`` if needed and prove that files can be written in it, by
    creating and removing one. ``os.access`` is not proof: for root it says
    yes on /proc and on read-only bind mounts. Raises OSError."""
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".xpu-diag-probe-", dir=path)
    os.close(fd)
    os.unlink(tmp)
