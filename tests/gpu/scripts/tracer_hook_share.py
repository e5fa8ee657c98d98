"""One NCCL rank with the hook preloaded and the tracer patched in (the
launcher's set-up, by hand): 300 async all-reduces on a named group. Prints
RESULT JSON: the tracer's and the hook's STARTs for the group, and the lane
the agent reports for it from both regions (name, seq, producer)."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from diag.agent.sampler import Sampler
from diag.agent.state import NodeState
from diag.records import format as fmt
from diag.records.writer import RecordWriter
from diag.tracer import collectives, hooked
from diag.tracer.core import Tracer

shm = os.environ["XPU_TIMER_SHM_DIR"]
N = 300
torch.cuda.set_device(0)
dist.init_process_group("nccl")
writer = RecordWriter(shm, producer=fmt.PRODUCER_PYTHON, rank=0, local_rank=0, world_size=1, capacity=1 << 12)
tracer = Tracer(writer, 0)
collectives.patch(tracer)
state = NodeState()
sampler = Sampler(shm, state, os.getpid(), print, is_descendant=lambda pid, root: True)   # its own worker
group = dist.new_group([0], group_desc="TENSOR_MODEL_PARALLEL_GROUP")
x = torch.ones(256, device="cuda")
for i in range(N):
    work = dist.all_reduce(x, group=group, async_op=True)
    work.wait()
    if i % 50 == 0:
        torch.cuda.synchronize()
        sampler.sample()                     # the agent drains as it would, every few ms
torch.cuda.synchronize()
time.sleep(0.5)                              # the hook's drainer writes its last ENDs
sampler.sample()
lanes = [{"comm_id": m.comm_id, "name": m.group_name, "started": m.last_started_seq,
          "completed": m.last_completed_seq} for m in state.report(with_perf=False)[0].comms]
# Each producer's own count of the lanes it saw: (producer, comm id, lane kind) -> last seq started.
counts = {f"{producer}:{comm}:{kind}": lane.started
          for (producer, comm, kind), lane in state.ranks[0].comms.lanes.items()}
print("RESULT " + json.dumps({"lanes": lanes, "producer_lanes": counts, "present": hooked.find().present,
                              "tie_ops": hooked.TIE_OPS, "n": N, "y": x[:2].tolist()}))
dist.destroy_process_group()
