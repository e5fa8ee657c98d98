"""``xpu-diag``: the umbrella command for talking to a running job.

Each subcommand lives in its own module with ``main(argv) -> int``; this file
only dispatches, and imports a subcommand's module only when it is asked for,
so ``xpu-diag --help`` needs neither torch nor grpc.
"""

from __future__ import annotations

import importlib
import sys

from diag import __version__

# name -> (module with main(argv), one-line help)
SUBCOMMANDS = {
    "top": ("diag.perf.top", "live per-rank view of a running job (GEMM TFLOP/s, busbw, wait share)"),
    "timeline": ("diag.timeline.cli", "write the last N seconds of every rank as a Perfetto trace"),
}


def usage() -> str:
    width = max(len(n) for n in SUBCOMMANDS)
    lines = ["usage: xpu-diag COMMAND [options]   (xpu-diag COMMAND --help for its options)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in SUBCOMMANDS.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"xpu-diag {__version__}")
        return 0
    entry = SUBCOMMANDS.get(argv[0])
    if entry is None:
        sys.stderr.write(f"xpu-diag: {argv[0]!r} is not a command; one of: {', '.join(SUBCOMMANDS)}\n")
        return 2
    return importlib.import_module(entry[0]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
