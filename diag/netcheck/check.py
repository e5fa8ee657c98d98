"""The check itself: join the job, take part in the rounds, merge, print and write the verdict.

``netcheck`` (cli.py) and ``netcheck preflight`` (preflight.py) both run it.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from diag import faultlist
from diag.netcheck.api import EXIT_FAULTY, EXIT_HEALTHY, EXIT_INCOMPLETE, NetcheckError
from diag.netcheck.config import Config
from diag.netcheck.report import Reporter, render_table, slurm_hostlist, taint_commands


def run_pairwise(cfg: Config, local_doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """Join the job, take part in every round; rank 0 also coordinates. Returns the final document.

    ``local_doc`` (this host's switchbox result) travels to the coordinator
    with the join, so the final fault list covers every host's switchbox too.
    """
    from diag.netcheck.coordinator import Coordinator
    from diag.netcheck.node import Node
    from diag.netcheck.session import Session

    from diag.netcheck.iface import choose
    from diag.netcheck.node import pick_backend
    choose(cfg, pick_backend(cfg))   # a loopback that peers cannot reach stops here, before any wait
    serve = cfg.rdzv.node_rank == 0 and not cfg.rdzv.agent_store
    session = Session(cfg.rdzv.master_addr, cfg.rdzv.master_port, cfg.rdzv.node_rank, serve, cfg.rdzv.join_timeout)
    try:
        node = Node(cfg, session, local_doc)
        if cfg.rdzv.node_rank != 0:
            return node.run()
        box: dict[str, Any] = {}

        def take_part() -> None:
            try:
                box["doc"] = node.run()
            except BaseException as exc:  # noqa: BLE001 - reported below, never lost in a thread
                box["error"] = exc

        thread = threading.Thread(target=take_part, name="netcheck-node0", daemon=True)
        thread.start()
        reporter = Reporter(cfg.out.progress)
        try:
            doc = Coordinator(cfg, session, reporter, own_node_alive=thread.is_alive).run()
        finally:
            reporter.close()
        thread.join(cfg.measure.timeout)
        if isinstance(box.get("error"), NetcheckError):
            raise box["error"]
        return doc
    finally:
        session.close()


def merge(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One fault list from the switchbox and pairwise parts (records and faults kept)."""
    entries = [e for doc in docs for e in faultlist.entries_of(doc)]
    records: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    for doc in docs:
        records.extend(doc["records"])
        extra.update({k: v for k, v in doc.items() if k not in ("faulty", "records", "version", "created_unix")})
    created = min((d["created_unix"] for d in docs), default=None)
    return faultlist.to_document(entries, records, created, **extra)


def emit(cfg: Config, doc: dict[str, Any], lead: bool) -> None:
    """Print in --format (lead only; others one line), then write --output (every node).

    Printing comes first so that a fault list that cannot be written still
    leaves its verdict in the log.
    """
    names = [f["node"] for f in doc["faulty"]]
    if not lead:
        print(f"netcheck: node rank {cfg.rdzv.node_rank}: {len(names)} faulty node(s)"
              + (f": {slurm_hostlist(names)}" if names else ""), file=sys.stderr)
    elif cfg.out.format == "json":
        print(json.dumps(doc, indent=1))
    elif cfg.out.format == "slurm":
        print(slurm_hostlist(names))
    elif cfg.out.format == "taints":
        print("\n".join(taint_commands({f["node"]: f["reason"] for f in doc["faulty"]}, cfg.out.taint_key)))
    else:
        render_table(doc, verbose=cfg.out.verbose)
    sys.stdout.flush()
    if cfg.out.rank_order and doc.get("rank_order"):
        from diag.netcheck import rankorder
        try:
            rankorder.write(cfg.out.rank_order, doc["rank_order"])
        except OSError as exc:
            raise NetcheckError(f"--rank-order: cannot write {cfg.out.rank_order} ({exc.strerror or exc})") from None
    if cfg.out.output:
        try:
            faultlist.write_document(cfg.out.output, doc)
        except OSError as exc:
            raise NetcheckError(f"--output: cannot write {cfg.out.output} ({exc.strerror or exc}); "
                                "give a path in a writable directory") from None


def run(cfg: Config) -> int:
    local = None
    if cfg.switchbox and cfg.rdzv.local_rank == 0:    # one switchbox check per host, not per GPU process
        from diag.netcheck.switchbox import run_switchbox
        local = run_switchbox(cfg, Reporter(cfg.out.progress))
    doc = run_pairwise(cfg, local) if cfg.pairwise else merge([local] if local else [])
    if cfg.rdzv.spawn_dir:       # a child of --nproc-per-node: the parent prints and writes (spawn.py)
        from diag.netcheck.handoff import hand_up
        hand_up(cfg, doc=doc)
    else:
        emit(cfg, doc, lead=cfg.rdzv.node_rank == 0 or not cfg.pairwise)
    return verdict_code(doc)


def verdict_code(doc: dict[str, Any]) -> int:
    """1 when a node is faulty; else 4 when --deadline left nodes unknown; else 0."""
    if doc["faulty"]:
        return EXIT_FAULTY
    return EXIT_INCOMPLETE if doc.get("summary", {}).get("unknown") else EXIT_HEALTHY
