"""Everything netcheck shows: progress, the final table, Slurm and Kubernetes forms.

Rich progress bars when stderr is a terminal; otherwise one plain line per
event, so logs from Slurm or a pod stay readable.
"""

from __future__ import annotations

import re
import shlex
import sys
from typing import Any, Iterable

from diag.common.ranks import fold
from diag.faultlist import NAME_MAX, printable
from diag.netcheck.ncclnet import NcclNet

_NUMBERED = re.compile(r"^(.*?)(\d+)$")
_HOSTLIST_ITEM = re.compile(r"([^,\[\]]+)(?:\[([^\]]*)\]([^,\[\]]*))?")


def slurm_hostlist(names: Iterable[str]) -> str:
    """``["node3", "node7", "node8"]`` -> ``"node[3,7-8]"`` (Slurm hostlist syntax).

    Zero-padded numbers keep their width (``gpu01,gpu02`` -> ``gpu[01-02]``);
    names without a trailing number are listed as they are.
    """
    groups: dict[tuple[str, int], set[int]] = {}
    plain: list[str] = []
    for name in sorted({printable(n, NAME_MAX) for n in names}):   # peers' hostnames: one line, no escapes
        match = _NUMBERED.match(name)
        if not match:
            plain.append(name)
            continue
        prefix, digits = match.groups()
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((prefix, width), set()).add(int(digits))
    # gpu10 belongs with gpu01,gpu02: its natural width is the padded width.
    for (prefix, width) in [k for k in groups if k[1]]:
        plain_nums = groups.get((prefix, 0), set())
        moved = {n for n in plain_nums if len(str(n)) == width}
        groups[(prefix, width)] |= moved
        plain_nums -= moved
    parts = []
    for (prefix, width), numbers in sorted((k, v) for k, v in groups.items() if v):
        if len(numbers) == 1:
            parts.append(f"{prefix}{next(iter(numbers)):0{width}d}")
            continue
        ranges = []
        for piece in fold(numbers).split(","):
            ranges.append("-".join(f"{int(x):0{width}d}" for x in piece.split("-")))
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts + plain)


def expand_hostlist(text: str) -> list[str]:
    """``"gpu[01-03,7],cpu1"`` -> ``["gpu01", "gpu02", "gpu03", "gpu7", "cpu1"]`` (Slurm's order).

    The inverse of :func:`slurm_hostlist` for what Slurm puts in
    SLURM_JOB_NODELIST; a list it cannot read gives [] (names then stay unknown).
    """
    out: list[str] = []
    for match in _HOSTLIST_ITEM.finditer(text or ""):
        prefix, ranges, suffix = match.group(1), match.group(2), match.group(3) or ""
        if ranges is None:
            out.append(prefix + suffix)
            continue
        for piece in ranges.split(","):
            lo, _, hi = piece.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                return []
            width = len(lo) if lo.startswith("0") else 0
            out.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi or lo) + 1))
    return out


def taint_commands(faulty: dict[str, str], key: str) -> list[str]:
    """kubectl commands that keep pods off the faulty nodes. Printed, never run."""
    out = []
    for node, reason in sorted(faulty.items()):
        # Names and reasons carry peers' hostnames: a newline in one must not start a line of its own
        # (the output is meant for a shell), nor an escape sequence reach the terminal.
        name = printable(node, NAME_MAX)
        out.append(f"# {name}: {printable(reason)}")
        out.append(f"kubectl taint nodes {shlex.quote(name)} {key}=netcheck:NoSchedule --overwrite")
    return out


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


TABLE_WIDTH = 120


def render_table(doc: dict[str, Any], console: Any = None, verbose: bool = False) -> None:
    """The end-of-run verdict: one row per node (``verbose``: one per measurement), then the faulty hostlist."""
    from rich.console import Console

    # Logs are read wide, but not wider than TABLE_WIDTH.
    console = console or Console(file=sys.stdout, width=None if sys.stdout.isatty() else TABLE_WIDTH)
    console.print(_records_table(doc) if verbose else _nodes_table(doc, min(console.width, TABLE_WIDTH)))
    if line := nccl_networks(doc):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if doc["faulty"]:
        console.print("faulty: " + slurm_hostlist(f["node"] for f in doc["faulty"]))


def nccl_networks(doc: dict[str, Any]) -> str:
    """One line: which network NCCL said it used, and on which nodes (the odd one out is the point:
    ``NCCL: IB mlx5_0,mlx5_1 on gpu[01-15]; Socket eth0 on gpu16``). Empty for gloo."""
    by_net: dict[str, list[str]] = {}
    for r in doc["records"]:
        nccl = (r.get("extra") or {}).get("nccl") if r["metric"] == "node" else None
        if nccl:
            net = NcclNet(**nccl)
            by_net.setdefault(net.short() or f"not recorded ({net.unrecorded})", []).append(r["node"])
    parts = sorted(by_net.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return "NCCL: " + "; ".join(f"{net} on {slurm_hostlist(nodes)}" for net, nodes in parts) if parts else ""


def _worst(records: list[dict[str, Any]]) -> str:
    """The measurement furthest under its expectation, as ``metric value/expected unit``."""
    scored = [r for r in records if isinstance(r.get("value"), (int, float)) and r.get("expected")]
    if not scored:
        return "-"
    r = min(scored, key=lambda r: r["value"] / r["expected"])
    return f"{r['metric']} {_fmt(r['value'])}/{_fmt(r['expected'])} {r['unit']}".strip()


def node_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per node: node, node_rank, addr, verdict, worst, reason (faulty first, then by rank)."""
    faulty = {f["node"]: f for f in doc["faulty"]}
    rows: dict[str, dict[str, Any]] = {}
    for r in doc["records"]:
        if r["node"] == "*":
            continue
        row = rows.setdefault(r["node"], {"node": r["node"], "node_rank": None, "addr": "", "verdict": "pass",
                                          "reason": "", "records": []})
        if r["metric"] == "node":
            extra = r.get("extra") or {}
            row.update(node_rank=extra.get("node_rank"), addr=extra.get("addr") or "", verdict=r["verdict"],
                       reason=r["reason"])
        else:
            row["records"].append(r)
    for name, f in faulty.items():
        row = rows.setdefault(name, {"node": name, "node_rank": f.get("node_rank"), "addr": f.get("addr", ""),
                                     "records": []})
        row.update(verdict="fail", reason=row.get("reason") or f["reason"])
        row["node_rank"] = row["node_rank"] if row["node_rank"] is not None else f.get("node_rank")
        row["addr"] = row["addr"] or f.get("addr", "")
    for row in rows.values():
        row["worst"] = _worst(row.pop("records"))
    order = {"fail": 0, "unknown": 1}
    return sorted(rows.values(), key=lambda r: (order.get(r["verdict"], 2), r["node_rank"] if r["node_rank"]
                                                 is not None else 1 << 30, r["node"]))


def _nodes_table(doc: dict[str, Any], width: int) -> Any:
    from rich.table import Table

    table = Table(title=f"netcheck: {len(doc['faulty'])} faulty node(s)", width=width)
    for col, kw in (("node", {"max_width": 24}), ("rank", {"justify": "right"}), ("addr", {"max_width": 16}),
                    ("verdict", {}), ("worst vs expected", {"max_width": 34}), ("reason", {"ratio": 1})):
        table.add_column(col, overflow="ellipsis", no_wrap=True, **kw)
    for row in node_rows(doc):
        table.add_row(row["node"], _fmt(row["node_rank"]), row["addr"] or "-", row["verdict"], row["worst"],
                      row["reason"], style="red" if row["verdict"] == "fail" else None)
    return table


def _records_table(doc: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"netcheck: {len(doc['faulty'])} faulty node(s)")
    for col in ("node", "gpu/link", "metric", "value", "unit", "expected", "threshold", "verdict", "rule / reason"):
        table.add_column(col, overflow="fold")
    records = sorted(doc["records"], key=lambda r: (r["verdict"] != "fail", r["node"], r.get("link") or ""))
    for r in records:
        style = "red" if r["verdict"] == "fail" else None
        gpu = "" if r.get("gpu") is None else f"gpu{r['gpu']}"
        link = r.get("link") or ""
        where = link if not gpu or gpu in link else f"{gpu} {link}".strip()
        why = f"{r['rule']}: {r['reason']}" if r.get("rule") else r.get("reason", "")
        table.add_row(r["node"], where, r["metric"], _fmt(r["value"]), r["unit"], _fmt(r.get("expected")),
                      _fmt(r.get("threshold")), r["verdict"], why, style=style)
    return table


class Reporter:
    """Progress for the coordinator: one bar per round, or plain lines."""

    def __init__(self, enabled: bool, prefix: str = "netcheck"):
        self.prefix = prefix
        self.rich = None
        if enabled and sys.stderr.isatty():
            from rich.progress import Progress
            self.rich = Progress(transient=False)
            self.rich.start()
        self.task = None

    def log(self, message: str) -> None:
        if self.rich is not None:
            self.rich.console.print(message)
        else:
            print(f"{self.prefix}: {message}", file=sys.stderr, flush=True)

    def start(self, what: str, total: int) -> None:
        if self.rich is not None:
            self.task = self.rich.add_task(what, total=total)
        else:
            self.log(f"{what}: {total} to do")

    def advance(self, n: int = 1) -> None:
        if self.rich is not None and self.task is not None:
            self.rich.advance(self.task, n)

    def close(self) -> None:
        if self.rich is not None:
            self.rich.stop()
            self.rich = None
