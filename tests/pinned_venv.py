"""Fresh virtual environments with pinned packages, for the dependency tests.

Installing needs the package index; when that fails and the index cannot be
reached, the test is skipped (offline machine), otherwise it fails with pip's
own message.
"""

from __future__ import annotations

import pathlib
import socket
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
INDEX_HOST = ("pypi.org", 443)


def index_reachable(timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection(INDEX_HOST, timeout=timeout):
            return True
    except OSError:
        return False


def make_venv(path: pathlib.Path, requirements: list[str], timeout: float = 240) -> pathlib.Path:
    """A venv at ``path`` (no pip of its own) holding exactly ``requirements``
    and their dependencies; returns its python. Skips the test when offline."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                           "--disable-pip-version-check", *requirements],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        if not index_reachable():
            pytest.skip(f"cannot install {' '.join(requirements)}: the package index is not reachable")
        pytest.fail(f"pip install {' '.join(requirements)} failed:\n{done.stderr[-3000:]}")
    return python
