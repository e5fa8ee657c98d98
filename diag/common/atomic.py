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
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def probe_writable_dir(path: str | os.PathLike) -> None:
    """Create ``path`` if needed and prove that files can be written in it, by
    creating and removing one. ``os.access`` is not proof: for root it says
    yes on /proc and on read-only bind mounts. Raises OSError."""
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".xpu-diag-probe-", dir=path)
    os.close(fd)
    os.unlink(tmp)
