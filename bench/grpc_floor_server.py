"""The transport floor for bench/collector_ingest.py --transport-floor: a
grpc.aio server with the collector's server options and the same Connect
method, that reads every NodeReport and does nothing with it. Its CPU per
report is what one Python gRPC process pays before the collector does any
work of its own (docs/collector.md, "Scale"). It writes its address to
--address-file and prints the collector's ``ingest:`` stats line each second
and its ``stopped (N node reports ingested`` line at exit, so the bench reads
it exactly as it reads the collector. It answers the handshake and checks
each call's credential with the collector's own interceptor (the token from
the environment, as the bench gives the collector), since agents hello
before they connect. Not for use outside the bench: no commands, no verdicts."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repo root, uninstalled

from diag.collector.auth import TokenInterceptor  # noqa: E402
from diag.collector.config import Config  # noqa: E402
from diag.common import envnames  # noqa: E402
from diag.collector.server import SPARE_CALLS, server_options  # noqa: E402
from diag.pb import collector_pb2_grpc as pb_grpc  # noqa: E402


class Discard(pb_grpc.CollectorServicer):
    def __init__(self):
        self.reports = 0

    async def Connect(self, request_iterator, context):
        await context.send_initial_metadata(())
        while True:   # as the collector reads: context.read(), one report at a time
            report = await context.read()
            if report is grpc.aio.EOF:
                return
            self.reports += 1


async def serve(args) -> None:
    calls = args.max_agents + SPARE_CALLS
    server = grpc.aio.server(maximum_concurrent_rpcs=calls, options=server_options(Config.max_dump_bytes, calls),
                             interceptors=[TokenInterceptor(os.environ[envnames.JOB_TOKEN])])
    servicer = Discard()
    pb_grpc.add_CollectorServicer_to_server(servicer, server)
    port = server.add_insecure_port(args.listen)
    await server.start()
    tmp = args.address_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{args.listen.rsplit(':', 1)[0]}:{port}")
    os.replace(tmp, args.address_file)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    last, last_t = 0, time.monotonic()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            pass
        now = time.monotonic()
        print(f"ingest: {servicer.reports} reports total, {(servicer.reports - last) / (now - last_t):.1f}/s over "
              f"the last {now - last_t:.3f} s", file=sys.stderr, flush=True)
        last, last_t = servicer.reports, now
    await server.stop(1.0)
    print(f"floor: stopped ({servicer.reports} node reports ingested)", file=sys.stderr, flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--address-file", required=True)
    p.add_argument("--max-agents", type=int, default=16384)
    asyncio.run(serve(p.parse_known_args()[0]))


if __name__ == "__main__":
    main()
