"""Write output files whole or not at all, with the viewer's error wording."""

from __future__ import annotations

from pathlib import Path

from diag.common.atomic import write_atomic
from viewer.api import ViewerError


def write_text(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text`` (UTF-8). Raises ViewerError."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Atomically replace ``path`` with ``data``. Raises ViewerError."""
    path = Path(path)
    try:
        write_atomic(path, data)
    except OSError as e:
        raise ViewerError(f"{path}: cannot write ({e.strerror}); choose a writable --out") from None
