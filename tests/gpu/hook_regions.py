"""Reading a hook region from inside the job, without consuming it.

Under xpu_timer_launch the node agent is the region's one reader (it moves
read_idx). A worker that wants to look at its own records after the fact
must not race it: ``peek`` reads the slots still in the ring (the newest
``capacity`` records) and writes nothing.
"""

from __future__ import annotations

import collections
import glob
import mmap
import os
import statistics

from diag.records import format as fmt


def own_region(shm_dir: str | None = None) -> str | None:
    """This process's hook region, or None (no hook, or it switched itself off)."""
    shm_dir = shm_dir or os.environ.get("XPU_TIMER_SHM_DIR", "")
    paths = glob.glob(os.path.join(shm_dir, f"hook-r*-p{os.getpid()}.ring"))
    return paths[0] if paths else None


def peek(path: str) -> tuple[fmt.Header, list[fmt.Record]]:
    """The header and the records still held in the ring, oldest first."""
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    try:
        header = fmt.Header.unpack(mm, path)
        write_idx = fmt.U64.unpack_from(mm, fmt.OFF_WRITE_IDX)[0]
        first = max(0, write_idx - header.capacity)
        records = [fmt.Record.unpack_from(mm, fmt.HEADER_SIZE + (i % header.capacity)
                                          * fmt.RECORD_SIZE) for i in range(first, write_idx)]
    finally:
        mm.close()
    return header, records


def summarize(records: list[fmt.Record]) -> dict:
    """Per op name: ends, median duration and TFLOP/s; kernel launch counts."""
    ops = collections.defaultdict(list)
    for r in records:
        if r.event == fmt.EVENT_END:
            ops[r.name].append(r)
    out = {"ops": {}, "kernels": collections.Counter(), "captured": collections.Counter()}
    for name, ends in ops.items():
        timed = [r for r in ends if r.flags & fmt.FLAG_DEVICE_TIMED and r.duration_ns > 0]
        tflops = [r.flops / r.duration_ns / 1e3 for r in timed if r.flops]
        out["ops"][name] = {
            "ends": len(ends), "timed": len(timed),
            "failed": sum(1 for r in ends if r.flags & fmt.FLAG_FAILED),
            "median_us": statistics.median(r.duration_ns for r in timed) / 1e3 if timed else 0,
            "median_tflops": statistics.median(tflops) if tflops else 0,
            "max_tflops": max(tflops) if tflops else 0,
            "seqs": [r.seq for r in ends][:64], "comm_ids": sorted({r.comm_id for r in ends}),
            "bytes": sorted({r.bytes for r in ends})[:8],
            "comm_size": sorted({r.comm_size for r in ends}),
        }
    for r in records:
        if r.event == fmt.EVENT_COUNT:
            key = "captured" if r.flags & fmt.FLAG_GRAPH_CAPTURED else "kernels"
            out[key][r.name] += r.count
    out["kernels"] = dict(out["kernels"].most_common(20))
    out["captured"] = dict(out["captured"])
    out["kernel_launches"] = sum(r.count for r in records
                                 if r.event == fmt.EVENT_COUNT and r.kind == fmt.KIND_KERNEL)
    return out
