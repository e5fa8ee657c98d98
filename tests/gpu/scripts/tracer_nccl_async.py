"""One NCCL rank, the tracer patched in: an async all-reduce queued behind
~0.8 s of work on the default stream. Prints JSON: how long a kernel on
another stream took after the training thread's completion look (it must
not wait for the all-reduce), and the op's START/END from the region."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from diag.records import format as fmt
from diag.records.reader import RegionReader
from diag.records.writer import RecordWriter
from diag.tracer import collectives, completion
from diag.tracer.core import Tracer

shm = sys.argv[1]
torch.cuda.set_device(0)
dist.init_process_group("nccl")
writer = RecordWriter(shm, producer=fmt.PRODUCER_PYTHON, rank=0, local_rank=0, world_size=1)
tracer = Tracer(writer, 0)
collectives.patch(tracer)
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)                       # NCCL's communicator, warm
torch.cuda.synchronize()
torch.cuda._sleep(int(1.5e9))            # ~0.8 s of the default stream
work = dist.all_reduce(x, async_op=True)  # NCCL's stream waits for it
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    completion.watcher(tracer).check()   # the look the training thread makes at its next wait or sync op
    y = torch.ones(4, device="cuda") * 2
    done = torch.cuda.Event()
    done.record(side)
t0 = time.monotonic()
done.synchronize()
side_s = time.monotonic() - t0
work.wait()
torch.cuda.synchronize()
time.sleep(0.1)                          # the watcher's look, every 5 ms
records = RegionReader(writer.path).poll()
ops = [r for r in records if r.name == "all_reduce"]
start = [r for r in ops if r.event == fmt.EVENT_START][-1]
end = [r for r in ops if r.event == fmt.EVENT_END and r.op_id == start.op_id]
print("RESULT " + json.dumps({"side_stream_s": side_s, "ended": bool(end),
                              "op_s": (end[0].t_mono_ns - start.t_mono_ns) / 1e9 if end else None,
                              "y": y.tolist()}), flush=True)
dist.destroy_process_group()
