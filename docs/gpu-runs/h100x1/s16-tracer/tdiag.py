"""Where does the traced NCCL op's cost go? Variants in one process, alternating."""
import os, sys, json, time, statistics, tempfile, shutil, threading
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
from diag.records import format as fmt
from diag.records.writer import RecordWriter
from diag.tracer import collectives, completion, dispatch
from diag.tracer.core import Tracer

rank = int(os.environ.get("RANK", 0)); world = int(os.environ.get("WORLD_SIZE", 1))
dev = f"cuda:{int(os.environ.get('LOCAL_RANK', 0)) % torch.cuda.device_count()}"
torch.cuda.set_device(dev)
dist.init_process_group("nccl")
group = dist.new_group(list(range(world)), group_desc="TP")
N = int(os.environ.get("OPS", "32"))
tensors = [torch.ones(256, device=dev) for _ in range(N)]
shm = os.environ["XPU_TIMER_SHM_DIR"]
writer = RecordWriter(shm, producer=fmt.PRODUCER_PYTHON, rank=rank, local_rank=rank, world_size=world, capacity=1 << 16)
tracer = Tracer(writer, rank)
SYNC = os.environ.get("SYNC", "1") == "1"

def step():
    works = [dist.all_reduce(t, group=group, async_op=True) for t in tensors]
    for w in works:
        w.wait()
    if SYNC:
        torch.cuda.synchronize()

orig_add = completion.Completions.add
orig_run = completion.Completions._run
orig_below = dispatch._below
ORIG_AR = dist.all_reduce
def set_variant(v):
    completion.Completions.add = orig_add
    completion.Completions._run = orig_run
    dispatch._below = orig_below
    collectives.unpatch()
    dist.all_reduce = ORIG_AR
    completion.Completions.POLL_S = 0.005
    completion.Completions.QUIET_NS = 1_000_000
    if v == "off":
        return
    collectives.patch(tracer)
    if v == "no_below":
        dispatch._below = None
    elif v == "finish_now":     # no watcher: END at the call
        completion.Completions.add = lambda self, rec, works, on_cpu: self.tracer.finish(rec)
    elif v == "no_thread":
        completion.Completions._run = lambda self: None
    elif v == "hold":        # END at the call, but the works kept a while, as the watcher keeps them
        def add(self, rec, works, on_cpu):
            HELD.append(works); self.tracer.finish(rec)
            if len(HELD) > 64: del HELD[:32]
        completion.Completions.add = add
    elif v == "passthru":    # the wrapper's frame, nothing recorded
        collectives.unpatch()
        import functools
        orig = ORIG_AR
        def passthru(*a, **k):
            return orig(*a, **k)
        dist.all_reduce = passthru
    elif v == "poll50":
        completion.Completions.POLL_S = 0.05
        completion.Completions.QUIET_NS = 50_000_000
HELD = []

# no_thread: a watcher whose thread never runs (ops pile up; short blocks)
variants = os.environ.get("VARIANTS", "off,full,no_below,finish_now").split(",")
for _ in range(30):
    step()
res = {v: [] for v in variants}
ROUNDS = int(os.environ.get("ROUNDS", "10"))
for i in range(ROUNDS):
    order = variants if i % 2 == 0 else list(reversed(variants))
    for v in order:
        set_variant(v)
        dist.barrier(group=group)
        torch.cuda.synchronize()
        for _ in range(20):
            t0 = time.perf_counter_ns(); step(); res[v].append(time.perf_counter_ns() - t0)
set_variant("off")
if os.environ.get("PROFILE") and rank == 0:
    pass
if rank == 0:
    base = statistics.median(res[variants[0]])
    print(f"world {world} ops {N} sync {SYNC}")
    for v in variants:
        m = statistics.median(res[v])
        print(f"  {v:12s} {m/1e3:8.1f} us/step  {(m-base)/N:8.0f} ns/op over {variants[0]}")
# a steady traced loop for py-spy
if os.environ.get("SPIN"):
    set_variant("full")
    t_end = time.time() + float(os.environ["SPIN"])
    n = 0; t0 = time.perf_counter_ns()
    while time.time() < t_end:
        step(); n += 1
    if rank == 0:
        print(f"  spin full: {(time.perf_counter_ns()-t0)/n/1e3:.1f} us/step over {n} steps")
    set_variant("off")
dist.destroy_process_group()
