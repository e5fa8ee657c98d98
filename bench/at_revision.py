"""One module of this repository as it was at a git revision, imported beside
this tree's own: the paired benches time a change against its parent in one
process (bench/tracer_overhead.py --before, bench/writer_hot_path.py --before)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def module_at(rev: str, path: str, name: str):
    """The module at ``path`` (repository-relative) of revision ``rev``,
    loaded under ``name``; its imports resolve to this tree's modules."""
    src = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{path}"], check=True, capture_output=True,
                         text=True).stdout
    file = os.path.join(tempfile.mkdtemp(prefix=f"{name}-"), f"{name}.py")
    with open(file, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
