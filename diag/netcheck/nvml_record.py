"""Record this host's NVML answers for netcheck's replay tests.

    python3 -m diag.netcheck.nvml_record --out tests/netcheck/fixtures/nvml_h200x2.json

It asks NVML exactly what ``netcheck --switchbox-check`` asks (topology,
PCIe and NVLink state, counters, ECC, retired pages, XID events), with the
links under load when CUDA is available, and writes the answers atomically.
The file is what ``--nvml-replay`` and tests/netcheck/ replay.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time

from diag.netcheck.api import NetcheckError
from diag.netcheck.health import link_health
from diag.netcheck.nvml import FORMAT_VERSION, RealNvml, RecordingNvml, try_query
from diag.netcheck.switchbox import busy_links, plan_box
from diag.gpu.record import cuda_available, write_recording


def record(nvml: RecordingNvml, under_load: bool) -> dict:
    plan = plan_box(nvml, None)
    nvml.watch_xid([g.index for g in plan.gpus])
    try_query(nvml, "nvmlSystemGetDriverVersion")
    if under_load and plan.gpus:
        with busy_links([g.index for g in plan.gpus], 64 << 20):
            link_health(nvml, plan.gpus, under_load=True)
    else:
        link_health(nvml, plan.gpus, under_load=False)
    return {"version": FORMAT_VERSION,
            "source": f"recorded on {socket.gethostname()} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
                      f" by diag.netcheck.nvml_record" + (" (links under load)" if under_load else " (idle)"),
            "gpus": [g.name for g in plan.gpus],
            "discovered_pairs": [p.label() for p in plan.pairs],
            "answers": nvml.answers}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nvml_record", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="where to write the recording (JSON)")
    p.add_argument("--idle", action="store_true", help="do not put the links under load while reading")
    args = p.parse_args(argv)
    try:
        nvml = RecordingNvml(RealNvml())
    except NetcheckError as exc:
        print(f"nvml_record: {exc}", file=sys.stderr)
        return 3
    doc = record(nvml, under_load=not args.idle and cuda_available())
    print(f"nvml_record: {write_recording(args.out, doc)} -> {args.out}; "
          f"pairs {' '.join(doc['discovered_pairs']) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
