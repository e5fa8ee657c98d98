"""Record this host's NVML answers for the GPU-health replay tests.

    python -m diag.gpu.record --out tests/gpu_health/fixtures/nvml_h100_recorded.json

Asks NVML exactly what the agent asks (identity, clocks and their event
reasons, temperature, power, ECC, remapped rows, PCIe link, NVLink error
counters) for every GPU, ``--steps`` times ``--interval`` apart, while every
GPU runs GEMMs (unless --idle), and collects the XID events that arrive
meanwhile. The first pass is the recording's ``answers``; each later pass
that changed anything is a ``timeline`` step (docs/gpu.md, "Recordings").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import threading
import time

from diag.common.atomic import write_atomic
from diag.gpu import sample
from diag.gpu.api import GpuError
from diag.gpu.nvml import FORMAT_VERSION, XID_KEY, RealNvml, RecordingNvml, try_query


def record(nvml: RecordingNvml, steps: int, interval_s: float, note: str = "") -> dict:
    """The recording document; ``nvml`` wraps the real library (or a replay, in tests)."""
    count = try_query(nvml, "nvmlDeviceGetCount") or 0
    nvml.watch_xid(list(range(count)))
    try_query(nvml, "nvmlSystemGetDriverVersion")
    t0 = time.monotonic()
    base, timeline, names = None, [], []
    for step in range(steps):
        if step:
            time.sleep(max(0.0, t0 + step * interval_s - time.monotonic()))
        nvml.answers = {} if base is not None else nvml.answers
        elapsed = time.monotonic() - t0
        names = [sample.identity_of(nvml, i).name for i in range(count)]
        for i in range(count):
            sample.read(nvml, i, time.time())
        try:
            events = nvml.wait_xid(0.0)
        except Exception:   # XID events not supported here: recorded as none
            events = []
        # XIDs are always a timeline step (the replay hands steps' XIDs out once, at their time)
        xids = [{k: e[k] for k in ("xid", "gpu_uuid")} for e in events]
        if base is None:
            base = dict(nvml.answers, **{XID_KEY: {"value": []}})
            changed = {}
        else:
            changed = {k: v for k, v in nvml.answers.items() if base.get(k) != v}
        if xids:
            changed[XID_KEY] = {"value": xids}
        if changed:
            timeline.append({"after_s": round(elapsed, 3), "answers": changed})
    return {"version": FORMAT_VERSION,
            "source": f"recorded on {socket.gethostname()} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} "
                      f"by diag.gpu.record{note}",
            "gpus": names, "answers": base or {}, "timeline": timeline}


@contextlib.contextmanager
def gemm_load(enabled: bool):
    """Every GPU multiplies bf16 matrices while the block runs (torch, if CUDA is there)."""
    stop, threads = threading.Event(), []
    if enabled:
        import torch

        def spin(device: int) -> None:
            a = torch.randn(8192, 8192, device=f"cuda:{device}", dtype=torch.bfloat16)
            while not stop.is_set():
                for _ in range(20):
                    a @ a
                torch.cuda.synchronize(device)

        for d in range(torch.cuda.device_count()):
            threads.append(threading.Thread(target=spin, args=(d,), daemon=True))
            threads[-1].start()
        time.sleep(2.0)   # clocks and power settle under the load
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def cuda_available() -> bool:
    """Whether torch sees a GPU to load while recording (no torch: no)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def write_recording(path: str, doc: dict) -> str:
    """Write the recording ``doc`` to ``path`` atomically, as sorted JSON;
    returns "N answers from G GPU(s)", the start of the line that this
    recorder and netcheck's (diag/netcheck/nvml_record.py) print."""
    write_atomic(path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    return f"{len(doc['answers'])} answers from {len(doc['gpus'])} GPU(s)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m diag.gpu.record", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="where to write the recording (JSON)")
    p.add_argument("--steps", type=int, default=10, help="passes over every GPU (10)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between passes (1)")
    p.add_argument("--idle", action="store_true", help="no GEMM load while reading")
    args = p.parse_args(argv)
    if not 1 <= args.steps <= 3600 or not 0 <= args.interval <= 60:
        print("diag.gpu.record: --steps must be 1..3600 and --interval 0..60 s", file=sys.stderr)
        return 2
    try:
        nvml = RecordingNvml(RealNvml())
    except GpuError as exc:
        print(f"diag.gpu.record: {exc}", file=sys.stderr)
        return 3
    load = not args.idle and cuda_available()
    with gemm_load(load):
        doc = record(nvml, args.steps, args.interval, " (GEMMs on every GPU)" if load else " (idle)")
    print(f"diag.gpu.record: {write_recording(args.out, doc)}, "
          f"{len(doc['timeline'])} timeline step(s) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
