"""Write output files whole or not at all: temp file in the same dir, then rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from viewer.api import ViewerError


def write_text(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text`` (UTF-8). Raises ViewerError."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise ViewerError(f"--out {path.parent}: cannot write ({e.strerror}); choose a writable --out") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise ViewerError(f"{path}: cannot write ({e.strerror}); choose a writable --out") from None
