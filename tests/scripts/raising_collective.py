# Collectives that raise, traced: each traceback's frames of xpu-diag are printed (one line per call).
import os, traceback, torch, torch.distributed as dist
dist.init_process_group("gloo")
calls = {"all_reduce": lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND),   # gloo: float BAND
         "all_reduce_grad": lambda: dist.all_reduce(torch.ones(2, requires_grad=True), op=dist.ReduceOp.BAND),
         "batch_isend_irecv": lambda: dist.batch_isend_irecv([])}                       # torch: an empty list
for name, call in calls.items():
    try:
        call()
    except Exception as exc:
        ours = [f"{f.name}@{os.path.basename(f.filename)}" for f in traceback.extract_tb(exc.__traceback__)
                if f"{os.sep}diag{os.sep}" in f.filename]
        print(f"RAISED {name} ours={','.join(ours)}", flush=True)
dist.destroy_process_group()
