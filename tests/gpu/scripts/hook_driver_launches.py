"""One rank on one GPU under the hook, in phases, each followed by the agent's
launch counter (METRICS_URL) once it settles: STEPS bf16 GEMMs into a
preallocated output (cuBLAS kernels only), STEPS grouped ncclSend/ncclRecv of
a rank to itself on a 1-GPU communicator of its own (NCCL's p2p kernel; torch
refuses a send to oneself, and its all_to_all may not reach NCCL's p2p path),
STEPS 1-rank all-reduces (an in-place sum on one rank launches nothing in
NCCL: "for 1 rank ... in-place is nop", enqueue.cc; the series check), and
TRITON_STEPS launches of a small Triton kernel where Triton compiles one.
Writes OUT_DIR/rank0.json (launches per phase, this rank's kernels by name)
and OUT_DIR/metrics.txt (the last scrape)."""
import ctypes, json, os, re, sys, time, urllib.request
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
import torch
import torch.distributed as dist
from tests.gpu.hook_regions import own_region, peek, summarize

out_dir, steps = sys.argv[1], int(os.environ.get("STEPS", "200"))
scrape = {"text": ""}


def settled_launches() -> float:
    """The agent's launch total once it stops moving (counts go out every 0.5 s)."""
    torch.cuda.synchronize()
    last, since, deadline = None, time.monotonic(), time.monotonic() + 30
    while time.monotonic() < deadline:
        scrape["text"] = urllib.request.urlopen(os.environ["METRICS_URL"], timeout=5).read().decode()
        found = re.findall(r"^xpu_diag_kernel_launches_total\{[^}]*\} (\S+)$", scrape["text"], re.M)
        value = float(found[0]) if found else -1.0
        if value != last:
            last, since = value, time.monotonic()
        elif time.monotonic() - since > 1.6:
            return value
        time.sleep(0.3)
    return last if last is not None else -1.0


torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
grad = torch.ones(16 * 2**20 // 4, device="cuda")   # 16 MiB of float32
send, recv = torch.ones(2**20, device="cuda"), torch.empty(2**20, device="cuda")
dist.all_reduce(grad)                     # first: ties the NCCL communicator to the group
ctypes.CDLL("libnccl.so.2", mode=ctypes.RTLD_GLOBAL)   # torch's, already loaded
nccl = ctypes.CDLL(None)                  # through the global scope: the hook's exports
comm, stream = ctypes.c_void_p(), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
assert nccl.ncclCommInitAll(ctypes.byref(comm), 1, (ctypes.c_int * 1)(0)) == 0


def self_p2p():
    nccl.ncclGroupStart()
    nccl.ncclSend(ctypes.c_void_p(send.data_ptr()), ctypes.c_size_t(send.numel()), 7, 0, comm, stream)
    nccl.ncclRecv(ctypes.c_void_p(recv.data_ptr()), ctypes.c_size_t(recv.numel()), 7, 0, comm, stream)
    assert nccl.ncclGroupEnd() == 0


self_p2p()
torch.matmul(a, a, out=c)
launches = {"start": settled_launches()}
for _ in range(steps):
    torch.matmul(a, a, out=c)
launches["gemm"] = settled_launches()
for _ in range(steps):
    self_p2p()
launches["p2p"] = settled_launches()
p2p_ok = bool((recv == 1).all())
for _ in range(steps):
    dist.all_reduce(grad)
launches["all_reduce"] = settled_launches()
triton = {"launches": 0}
try:
    import triton as tr
    import triton.language as tl

    @tr.jit
    def xpu_diag_add_one(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)
    x = torch.zeros(4096, device="cuda")
    xpu_diag_add_one[(4,)](x, x.numel(), BLOCK=1024)   # compiled here, outside the count
    before = settled_launches()
    n_triton = int(os.environ.get("TRITON_STEPS", "100"))
    for _ in range(n_triton):
        xpu_diag_add_one[(4,)](x, x.numel(), BLOCK=1024)
    triton = {"launches": n_triton, "ok": bool((x == n_triton + 1).all()),
              "counted": settled_launches() - before}
except Exception as exc:   # no Triton, or no compiler for its launcher: said, not judged
    triton = {"launches": 0, "skipped": repr(exc)[:300]}
result = {"region": own_region(), "steps": steps, "launches": launches, "triton": triton,
          "p2p_ok": p2p_ok}
if result["region"]:
    header, records = peek(result["region"])
    result.update(summarize(records), disabled=bool(header.flags & 1))
with open(os.path.join(out_dir, "metrics.txt"), "w") as f:
    f.write(scrape["text"])
with open(os.path.join(out_dir, "rank0.json"), "w") as f:
    json.dump(result, f, indent=1, default=list)
nccl.ncclCommDestroy(comm)
dist.destroy_process_group()
