import os, sys, time, tempfile
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
from diag.records import format as fmt
from diag.records.writer import RecordWriter
from diag.tracer import collectives, completion, dispatch
from diag.tracer.core import Tracer
dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29533")
os.environ.setdefault("RANK", "0"); os.environ.setdefault("WORLD_SIZE", "1")
if dev != "cpu": torch.cuda.set_device(dev)
dist.init_process_group("nccl" if dev != "cpu" else "gloo")
group = dist.new_group([0])
shm = tempfile.mkdtemp(dir="/dev/shm")
writer = RecordWriter(shm, producer=fmt.PRODUCER_PYTHON, rank=0, local_rank=0, world_size=1, capacity=1 << 16)
tracer = Tracer(writer, 0)
t = torch.ones(256, device=dev)
from torch.distributed import distributed_c10d as c10d
groups = collectives.GroupInfo(c10d, tracer)
N = 20000
def bench(name, fn):
    fn()
    t0 = time.perf_counter_ns()
    for _ in range(N): fn()
    print(f"{name:28s} {(time.perf_counter_ns()-t0)/N:8.0f} ns")
bench("lookup", lambda: groups.lookup(group))
bench("tensor_bytes", lambda: collectives.tensor_bytes(t))
bench("dtype_flags", lambda: collectives.dtype_flags(t))
bench("reduce_op_code", lambda: collectives.reduce_op_code(dist.ReduceOp.SUM))
bench("_on_cpu", lambda: collectives._on_cpu(t))
collectives._grad_enabled = torch.is_grad_enabled
bench("_needs_autograd", lambda: collectives._needs_autograd((t,), {"group": group, "async_op": True}))
def bf():
    op = tracer.begin(fmt.KIND_COLLECTIVE, "all_reduce", 5, 1024, 0, 1, True, 0, 0)
    tracer.finish(op)
bench("begin+finish", bf)
bench("time.monotonic_ns", time.monotonic_ns)
bench("below ctx", lambda: torch._C._AutoDispatchBelowAutograd().__enter__())
def fake(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    return None
w = collectives._wrap(tracer, groups, fake, "all_reduce", fmt.KIND_COLLECTIVE, "tensor")
bench("wrapper(fake) async", lambda: w(t, group=group, async_op=True))
bench("wrapper(fake) sync", lambda: w(t, group=group))
bench("fake", lambda: fake(t, group=group, async_op=True))
ar = c10d.all_reduce
def real(): 
    ar(t, group=group, async_op=True).wait()
wr = collectives._wrap(tracer, groups, ar, "all_reduce", fmt.KIND_COLLECTIVE, "tensor")
def traced():
    wr(t, group=group, async_op=True).wait()
def traced_sync():
    wr(t, group=group)
N = 5000
for _ in range(3):
    bench("real async+wait", real)
    bench("traced async+wait", traced)
    bench("traced sync", traced_sync)
    if dev != "cpu": torch.cuda.synchronize()
print("pending", completion.watcher(tracer).pending())
import shutil; shutil.rmtree(shm)
dist.destroy_process_group()
