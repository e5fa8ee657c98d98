"""``xpu-diag timeline``: the merged timeline of a running job, on demand.

    xpu-diag timeline --job /root/timeline/<job> --last 30s --out trace.json
    xpu-diag timeline --collector HOST:PORT --last 30s --out trace.json   # with XPU_TIMER_JOB_TOKEN

The collector asks every agent for its ring, merges the answers into one
Trace Event Format file (docs/timeline.md) and returns it; this command
writes it whole. Bad input: one line naming the option, exit 2; a collector
that cannot be reached or refuses: one line, exit 1.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Sequence

from diag.common import options
from diag.common.ranks import fold
from diag.common.atomic import output_file_problem, write_atomic
from diag.timeline.api import DEFAULT_WAIT_S, TimelineError

PROG = "xpu-diag timeline"


@dataclasses.dataclass(frozen=True)
class Options:
    out: str
    last_s: float
    wait_s: float
    collector: str | None = None
    job: str | None = None


def parse_args(argv: Sequence[str]) -> Options:
    """Pure: raises TimelineError (one line) on bad input."""
    try:
        return _parse(argv)
    except options.ConfigError as exc:
        raise TimelineError(str(exc)) from None


def _parse(argv: Sequence[str]) -> Options:
    p = options.parser(PROG, "write the last N seconds of every rank of a running job as a "
                             "Trace Event Format file (Perfetto, chrome://tracing)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--job", metavar="DIR", help="<timeline-path>/<job>: reads its collector.json")
    where.add_argument("--collector", metavar="HOST:PORT", help="the job's collector (with "
                                                               "XPU_TIMER_JOB_TOKEN set)")
    p.add_argument("--last", default="30s", metavar="D",
                   help="spans that ended within this long (30s); the agents keep "
                        "--timeline-window (30s) at most")
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the JSON")
    p.add_argument("--wait", default=f"{DEFAULT_WAIT_S:g}s", metavar="D",
                   help="how long the collector waits for the agents (10s)")
    ns = p.parse_args(list(argv))
    last_s = options.duration(ns.last, "--last")
    wait_s = options.duration(ns.wait, "--wait")
    if wait_s > 600:
        raise TimelineError(f"--wait: {ns.wait!r} is over 10m; use e.g. 10s")
    if not ns.job and not ns.collector:
        raise TimelineError("no job given: pass --job <timeline-path>/<job> "
                            "(or --collector HOST:PORT with XPU_TIMER_JOB_TOKEN set)")
    problem = output_file_problem("--out", ns.out, "timeline.json", give="a file")
    if problem:
        raise TimelineError(problem)
    return Options(ns.out, last_s, wait_s, ns.collector, ns.job)


def fetch(opts: Options):
    """GetTimeline from the job's collector; returns the TimelineReply."""
    import grpc

    from diag.common import collector_access as access
    from diag.pb import collector_pb2 as pb
    from diag.pb import collector_pb2_grpc as pb_grpc

    try:
        address, token = access.resolve(opts.collector, opts.job)
    except access.AccessError as exc:
        raise TimelineError(str(exc)) from None
    options = [("grpc.max_receive_message_length", 1 << 30)]
    with grpc.insecure_channel(address, options=options) as channel:
        stub = pb_grpc.CollectorStub(channel)
        try:
            metadata = access.metadata(channel, token, address)
            return stub.GetTimeline(pb.TimelineRequest(last_ns=int(opts.last_s * 1e9),
                                                       wait_ms=int(opts.wait_s * 1000)),
                                    metadata=metadata, timeout=opts.wait_s + 30)
        except access.AccessError as exc:
            raise TimelineError(str(exc)) from None
        except grpc.RpcError as exc:
            raise ConnectionError(_why(address, exc)) from None


def _why(address: str, exc) -> str:
    import grpc
    code = exc.code() if hasattr(exc, "code") else None
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"no collector answers at {address}: is the job still running?"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return f"the collector at {address} refused the job token; use the job's --job DIR"
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return f"the collector at {address} is older than xpu-diag timeline; upgrade it"
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    return f"collector at {address}: {code.name if code else 'error'}: {detail}"


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        opts = parse_args(argv)
        reply = fetch(opts)
    except SystemExit as exc:   # --help
        return int(exc.code or 0)
    except TimelineError as exc:        # bad input
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:      # no answer from the collector
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    try:
        write_atomic(opts.out, reply.trace_json)
    except OSError as exc:
        print(f"{PROG}: error: --out: cannot write {opts.out!r}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    other = json.loads(reply.trace_json).get("otherData", {})
    slices = reply.trace_json.count(b'"ph":"X"')
    missing = f"; nodes {fold(reply.nodes_missing)} did not answer" if reply.nodes_missing else ""
    print(f"{PROG}: {reply.ranks} rank(s), {slices} spans, last {opts.last_s:g} s "
          f"(agents keep {_window(other)}) -> {opts.out}{missing}")
    return 0


def _window(other: dict) -> str:
    windows = sorted({n.get("window_s") for n in other.get("nodes", [])} - {None})
    return ", ".join(f"{w:g} s" for w in windows) or "nothing"
