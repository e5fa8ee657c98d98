"""``xpu-diag top``: one row per rank, refreshed each second (rich).

Reaches the collector with ``--job <timeline-path>/<job>`` (its collector.json)
or ``--collector HOST:PORT`` with $XPU_TIMER_JOB_TOKEN. Keys while it runs:
t / b / w / s / r sort by GEMM TFLOP/s, all-reduce busbw, wait share, step
time, rank; q quits. Cells far from the column's median are highlighted
(docs/metrics.md says how). Each row shows the rank's oldest op in flight
and for how long, and while a hang lasts, whether the collector's verdict
names the rank hung or a culprit. Into a pipe it prints a plain table each
interval, as ``top -b`` does.
"""

from __future__ import annotations

import contextlib
import os
import select
import statistics
import sys
import time

from diag.common import options
from diag.common.options import ConfigError
from diag.perf import derive
from diag.perf.api import PerfError, RankFigures

SORTS = {"tflops": ("gemm_tflops", True), "busbw": ("allreduce_busbw", True),
         "wait": ("wait_share", True), "step": ("step_s", True), "rank": ("rank", False)}
KEYS = {"t": "tflops", "b": "busbw", "w": "wait", "s": "step", "r": "rank"}
OUTLIER = 0.2   # a cell more than 20% from its column's median is highlighted


def gpu_cell(view_rank) -> str:
    """The rank's GPU by PCI bus id (docs/gpu.md), its nvidia-smi index after
    it; ``lr N`` (the local rank) where the agent named no GPU."""
    if view_rank.HasField("gpu") and view_rank.gpu.pci_bus_id:
        g = view_rank.gpu
        return g.pci_bus_id + (f" #{g.index}" if g.index >= 0 else "")
    return f"lr {view_rank.local_rank}"


def parse_args(argv):
    p = options.parser("xpu-diag top", "live per-rank performance view of a running job")
    p.add_argument("--job", metavar="DIR", help="<timeline-path>/<job> (reads collector.json)")
    p.add_argument("--collector", metavar="HOST:PORT", help="with $XPU_TIMER_JOB_TOKEN set")
    p.add_argument("--sort", default="rank", choices=sorted(SORTS), help="initial sort (rank)")
    p.add_argument("--interval", default="1s", help="refresh period (1s)")
    p.add_argument("--once", action="store_true", help="print one table and exit (plain text, full width, "
                   "where stdout is not a terminal)")
    p.add_argument("--json", action="store_true", help="print one JSON document of every rank's figures and exit")
    ns = p.parse_args(argv)
    ns.interval = options.duration(ns.interval, "--interval")
    return ns


class Source:
    """The collector's GetPerfView, over one channel."""

    def __init__(self, collector, job_dir):
        import grpc

        from diag.common import collector_access as access
        from diag.pb import collector_pb2_grpc as pb_grpc
        try:
            self.address, token = access.resolve(collector, job_dir)
        except access.AccessError as exc:
            raise PerfError(str(exc)) from None
        self._grpc = grpc
        self.channel = grpc.insecure_channel(self.address)
        self.stub = pb_grpc.CollectorStub(self.channel)
        self._token, self._access = token, access
        self.metadata = None   # after the handshake, on the first fetch

    def fetch(self):
        from diag.pb import collector_pb2 as pb
        try:
            if self.metadata is None:
                self.metadata = self._access.metadata(self.channel, self._token, self.address)
            return self.stub.GetPerfView(pb.PerfViewRequest(), metadata=self.metadata, timeout=5)
        except self._access.AccessError as exc:
            raise PerfError(str(exc)) from None
        except self._grpc.RpcError as exc:
            if exc.code() == self._grpc.StatusCode.UNAUTHENTICATED:
                self.metadata = None   # the session ran out (or the collector restarted): a new handshake
            raise PerfError(f"collector {self.address}: {exc.code().name}: {exc.details()}") from None


def rows(view) -> list[tuple[object, RankFigures]]:
    return [(r, derive.figures(r.rank, r.perf)) for r in view.ranks]


def _outliers(figs: list[RankFigures], field: str) -> tuple[float, set[int]]:
    values = [getattr(f, field) for f in figs if getattr(f, field) > 0]
    if len(values) < 2:
        return 0.0, set()
    median = statistics.median(values)
    far = {f.rank for f in figs if getattr(f, field) > 0
           and abs(getattr(f, field) - median) > OUTLIER * median}
    return median, far


HEADS = ("rank", "hang", "node", "gpu", "TFLOP/s", "GEMM/s", "AR busbw GB/s", "wait %", "step ms",
         "launch/s", "slowest p99", "in flight", "for s", "age s")
LEFT = ("hang", "node", "slowest p99", "in flight")
COMPARED = ("TFLOP/s", "AR busbw GB/s", "wait %", "step ms")   # highlighted by distance from the median
STUCK_S = 5.0   # an op in flight this long is highlighted, verdict or not
MARKS = {"hung": "HUNG", "culprit": "CULPRIT"}


def in_flight_text(view_rank) -> str:
    """``all_reduce "default" seq 11``: the op, its group as the HANG line names it, its seq."""
    if not view_rank.HasField("in_flight"):
        return "-"
    op = view_rank.in_flight
    group = f' "{view_rank.in_flight_group}"' if view_rank.in_flight_group else ""
    return f"{op.name}{group}{f' seq {op.seq}' if op.seq else ''}"


def table_rows(view, sort: str) -> list[list[tuple[str, str]]]:
    """Sorted rows of (text, style) cells; style "" or a rich style name."""
    items = rows(view)
    field, reverse = SORTS[sort]
    items.sort(key=lambda item: getattr(item[1], field), reverse=reverse)
    figs = [f for _, f in items]
    medians = {name: _outliers(figs, name) for name in
               ("gemm_tflops", "allreduce_busbw", "wait_share", "step_s")}
    out = []
    for view_rank, f in items:
        def cell(text, name, low_is_bad=True):
            median, far = medians[name]
            if f.rank not in far:
                return text, ""
            bad = (getattr(f, name) < median) == low_is_bad
            return text, "bold red" if bad else "bold yellow"
        slow = max((o for o in f.ops if o.p99_s > 0 and o.kind in derive.COMM_KINDS),
                   key=lambda o: o.p99_s, default=None)
        out.append([
            (str(f.rank), ""), (view_rank.hostname or f"node {view_rank.node_rank}", ""),
            (gpu_cell(view_rank), ""), cell(f"{f.gemm_tflops:.1f}", "gemm_tflops"),
            (f"{f.gemm_count / f.window_s:.0f}" if f.window_s else "-", ""),
            cell(f"{f.allreduce_busbw / 1e9:.2f}" if f.allreduce_busbw else "-", "allreduce_busbw"),
            cell(f"{100 * f.wait_share:.1f}", "wait_share", low_is_bad=False),
            cell(f"{1e3 * f.step_s:.1f}" if f.steps else "-", "step_s", low_is_bad=False),
            (f"{f.launches_per_s:.0f}", ""),
            (f"{slow.name} {1e3 * slow.p99_s:.2f} ms" if slow else "-", ""),
            (in_flight_text(view_rank), ""), _age_cell(view_rank),
            (f"{view_rank.age_s:.1f}", "")])
        out[-1].insert(1, (MARKS.get(view_rank.verdict, ""), "bold red" if view_rank.verdict else ""))
    return out


def _age_cell(view_rank) -> tuple[str, str]:
    if not view_rank.HasField("in_flight"):
        return "-", ""
    age = view_rank.in_flight.age_ns / 1e9
    return f"{age:.1f}", "bold red" if view_rank.verdict or age >= STUCK_S else ""


def title(view, sort: str, now_text: str = "", plain_text: bool = False) -> str:
    """The heading; ``plain_text``: for a pipe or a file, no keys to press,
    and the ``*`` marks explained instead of the colours."""
    keys = "" if plain_text else "(keys t b w s r, q quits) "
    marks = ("*: >20% from the column's median" if plain_text
             else "red/yellow: >20% from the median")
    return (f"xpu-diag top · job {view.job_id} · {len(view.ranks)} ranks · sort: {sort} {keys}{now_text}".rstrip()
            + "\nTFLOP/s: GEMMs; AR busbw: all-reduce; wait: share of wall time in collectives; "
            f"in flight: the oldest op not ended, for s seconds; hang: the collector's verdict; {marks}")


def render(view, sort: str, now_text: str = ""):
    from rich.table import Table
    from rich.text import Text
    table = Table(title=title(view, sort, now_text), title_justify="left", expand=False)
    for head in HEADS:
        table.add_column(head, justify="left" if head in LEFT else "right", no_wrap=True)
    for row in table_rows(view, sort):
        table.add_row(*(Text(text, style=style) for text, style in row))
    return table


def as_json(view, sort: str) -> dict:
    """``--json``: every figure of every row, unrounded, in SI units (seconds,
    bytes/s, FLOP/s, shares 0..1); null where top shows ``-``."""
    out = []
    items = rows(view)
    field, reverse = SORTS[sort]
    items.sort(key=lambda item: getattr(item[1], field), reverse=reverse)
    for r, f in items:
        slow = max((o for o in f.ops if o.p99_s > 0 and o.kind in derive.COMM_KINDS),
                   key=lambda o: o.p99_s, default=None)
        out.append({
            "rank": f.rank, "local_rank": r.local_rank, "node_rank": r.node_rank, "hostname": r.hostname,
            "gpu": r.gpu.pci_bus_id if r.HasField("gpu") and r.gpu.pci_bus_id else None,
            "gemm_flops_per_s": f.gemm_tflops * 1e12,
            "gemm_per_s": f.gemm_count / f.window_s if f.window_s else None,
            "allreduce_busbw_bytes_per_s": f.allreduce_busbw or None,
            "wait_share": f.wait_share, "step_s": f.step_s if f.steps else None,
            "launches_per_s": f.launches_per_s,
            "slowest_p99": {"op": slow.name, "seconds": slow.p99_s} if slow else None,
            "in_flight": {"op": r.in_flight.name, "group": r.in_flight_group or None, "seq": r.in_flight.seq,
                          "seconds": r.in_flight.age_ns / 1e9} if r.HasField("in_flight") else None,
            "verdict": r.verdict or None,
            "window_s": f.window_s, "age_s": r.age_s})
    return {"job_id": view.job_id, "sort": sort, "ranks": out}


def plain(view, sort: str, now_text: str = "") -> str:
    """The same table as text, for a pipe or a file (outliers marked *)."""
    # Only the median comparisons get a "*": the hang marks and the age say themselves.
    cells = [list(HEADS)] + [[(t or "-") + ("*" if s and HEADS[i] in COMPARED else "") for i, (t, s) in enumerate(row)]
                             for row in table_rows(view, sort)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(HEADS))]
    lines = ["  ".join(c.ljust(w) if HEADS[i] in LEFT else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    return title(view, sort, now_text, plain_text=True) + "\n" + "\n".join(lines) + "\n"


@contextlib.contextmanager
def _keys():
    """Single key presses from a terminal; nothing when stdin is not one."""
    if not sys.stdin.isatty():
        yield lambda timeout: (time.sleep(timeout), None)[1]
        return
    import termios
    import tty
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read(timeout):
        ready, _, _ = select.select([fd], [], [], timeout)
        return os.read(fd, 1).decode(errors="ignore") if ready else None
    try:
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def main(argv=None) -> int:
    try:
        ns = parse_args(sys.argv[1:] if argv is None else argv)
        source = Source(ns.collector, ns.job)
        if ns.json:
            import json
            sys.stdout.write(json.dumps(as_json(source.fetch(), ns.sort), indent=1) + "\n")
            return 0
        if ns.once:
            return _once(source.fetch(), ns.sort)
        if not sys.stdout.isatty():
            return _batch(source, ns)
        return _live(source, ns)
    except (ConfigError, PerfError) as exc:
        sys.stderr.write(f"xpu-diag top: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 0


def _once(view, sort: str) -> int:
    """A terminal gets rich's table at its width; a pipe or a file (a log, a
    script) gets the plain table sized to its content: rich would draw 80
    columns there and cut every value that does not fit."""
    try:
        from rich.console import Console
    except ImportError:
        Console = None
    if Console is None or not sys.stdout.isatty():
        sys.stdout.write(plain(view, sort))
        return 0
    Console().print(render(view, sort))
    return 0


def _batch(source: Source, ns) -> int:
    """Into a pipe or a file: a plain table each interval (``top -b``), each
    written whole and flushed, so a reader sees it at once; a collector that
    does not answer is one line on stderr per try, and it goes on."""
    try:
        while True:
            try:
                text = plain(source.fetch(), ns.sort, time.strftime("%H:%M:%S")) + "\n"
                sys.stdout.write(text)
                sys.stdout.flush()
            except PerfError as exc:
                sys.stderr.write(f"xpu-diag top: {exc} (retrying)\n")
            time.sleep(ns.interval)
    except BrokenPipeError:   # | head: the reader is done
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _live(source: Source, ns) -> int:
    from rich.live import Live
    sort = ns.sort
    with _keys() as read_key, Live(auto_refresh=False, screen=False) as live:
        while True:
            try:
                live.update(render(source.fetch(), sort, time.strftime("%H:%M:%S")), refresh=True)
            except PerfError as exc:
                live.update(f"xpu-diag top: {exc} (retrying)", refresh=True)
            deadline = time.monotonic() + ns.interval
            while (left := deadline - time.monotonic()) > 0:
                key = read_key(left)
                if key == "q":
                    return 0
                if key in KEYS:
                    sort = KEYS[key]
                    break
