"""``netcheck preflight``: the job hook (Slurm Prolog / HealthCheckProgram, k8s init container).

Switchbox and NVML health on this node, then the pairwise check when peers
are given (--nnodes ... or torchrun env). Exit 0 when this node is healthy,
1 when it is faulty (a fault on another node is reported, not ours to
refuse), 4 when --deadline left this node unmeasured, 3 when the check
itself could not run. On a host without NVML the
switchbox part is skipped with one line, so CPU nodes can use the hook too.
"""

from __future__ import annotations

import socket
import sys

from diag import faultlist
from diag.netcheck.api import EXIT_FAULTY, EXIT_HEALTHY, EXIT_INCOMPLETE, UNKNOWN, NetcheckError
from diag.netcheck.config import Config
from diag.netcheck.report import Reporter


def _listed(cfg: Config) -> int | None:
    """EXIT_FAULTY when --fault-list names this node (matched as the launcher
    does); a list that cannot be read is one line and NetcheckError."""
    from diag.common.net import local_addrs
    try:
        faults = faultlist.load(cfg.out.fault_list)
    except faultlist.FaultListError as exc:
        raise NetcheckError(str(exc)) from None
    hit = faults.match(cfg.rdzv.node_name, socket.gethostname(), local_addrs())
    if hit is None:
        return None
    entry, how = hit
    print(f"netcheck preflight: {entry.node} (this node, matched by {how}) is in {cfg.out.fault_list}: "
          f"{entry.reason}", file=sys.stderr)
    return EXIT_FAULTY


def run_preflight(cfg: Config) -> int:
    from diag.netcheck.check import emit, merge, run_pairwise
    from diag.netcheck.switchbox import run_switchbox

    me = cfg.rdzv.node_name or socket.gethostname()
    if cfg.out.fault_list:
        listed = _listed(cfg)
        if listed is not None:
            return listed
    local = None
    try:
        if cfg.rdzv.local_rank == 0:
            local = run_switchbox(cfg, Reporter(cfg.out.progress))
    except NetcheckError as exc:
        if cfg.box.nvml_replay:
            raise
        print(f"netcheck preflight: switchbox skipped: {exc}", file=sys.stderr)
    if not cfg.pairwise and local is None:
        print(f"netcheck preflight: {me}: nothing to check here (no NVML, no peers); passing", file=sys.stderr)
        return EXIT_HEALTHY
    doc = run_pairwise(cfg, local) if cfg.pairwise else merge([local])
    emit(cfg, doc, lead=cfg.rdzv.node_rank == 0 or not cfg.pairwise)
    from diag.common.net import local_addrs
    listed = faultlist.FaultList(doc["created_unix"], entries=faultlist.entries_of(doc))
    hit = listed.match(cfg.rdzv.node_name, socket.gethostname(), local_addrs())
    if hit is not None:
        entry, how = hit
        print(f"netcheck preflight: {faultlist.printable(entry.node, faultlist.NAME_MAX)} (this node, matched by "
              f"{how}) is faulty: {faultlist.printable(entry.reason)}", file=sys.stderr)
        return EXIT_FAULTY
    # Never measured (--deadline): not healthy either; the scheduler decides.
    unknown = [faultlist.FaultEntry(r["node"], r["reason"], (r.get("extra") or {}).get("hostname") or "",
                                    (r.get("extra") or {}).get("node_rank"), (r.get("extra") or {}).get("addr") or "")
               for r in doc["records"] if r["metric"] == "node" and r["verdict"] == UNKNOWN]
    hit = faultlist.FaultList(doc["created_unix"], entries=unknown).match(cfg.rdzv.node_name, socket.gethostname(),
                                                                         local_addrs())
    if hit is not None:
        entry, how = hit
        print(f"netcheck preflight: {faultlist.printable(entry.node, faultlist.NAME_MAX)} (this node, matched by "
              f"{how}) is unknown: {faultlist.printable(entry.reason)}", file=sys.stderr)
        return EXIT_INCOMPLETE
    return EXIT_HEALTHY
