"""How a child of ``--nproc-per-node`` hands its result to the parent (spawn.py).

Each child writes its fault-list document or its exit status into
NETCHECK_SPAWN_DIR; the parent reads them back after torchrun returns. Kept
apart from spawn.py, which imports check.py to print the verdict, so that
check.py (in the child) can hand up without importing spawn.py: no import
cycle inside the package.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from diag.common.atomic import write_atomic
from diag.netcheck.config import Config


def hand_up(cfg: Config, doc: dict[str, Any] | None = None, code: int | None = None) -> None:
    """A child's document or exit status, for the parent (best effort: a full disk must not hang the job)."""
    name, data = (f"doc.{cfg.rdzv.node_rank}.json", json.dumps(doc)) if doc is not None else \
        (f"code.{cfg.rdzv.node_rank}", str(code))
    try:
        write_atomic(os.path.join(cfg.rdzv.spawn_dir, name), data.encode())
    except OSError as exc:
        print(f"netcheck: node rank {cfg.rdzv.node_rank}: cannot hand the result up ({exc})", file=sys.stderr)


def handed_up(where: str) -> tuple[dict[str, Any] | None, list[int]]:
    doc, codes = None, []
    for name in sorted(os.listdir(where)):
        path = os.path.join(where, name)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if name.startswith("doc.") and doc is None:
                doc = json.loads(text)
            elif name.startswith("code."):
                codes.append(int(text))
        except (OSError, ValueError):
            continue
    return doc, codes
