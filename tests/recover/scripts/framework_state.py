"""One gloo rank: what a snapshot would hold only in part, each registered
with a Checkpointer of its own: a ZeRO-3 engine's module and its ZeRO
optimizer on their own (the engine is what to register), and an engine whose
ZeRO-Offload keeps the optimizer's state in host memory. Prints RESULT: per
case what save() and restore() did and the lines the Checkpointer said."""
import importlib
import io
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
import torch  # noqa: E402

from diag.recover import Checkpointer  # noqa: E402

# No JIT build of DeepSpeed's CPU shared-memory all-reduce (tens of seconds of
# g++ on a fresh machine): only inference uses it (tests/frameworks/scripts/deepspeed_zero3.py).
importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
deepspeed.init_distributed(dist_backend="gloo")
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters()),
                                       config={"train_micro_batch_size_per_gpu": 2,
                                               "zero_optimization": {"stage": 3}})
small = torch.nn.Linear(8, 1)
offloaded, _, _, _ = deepspeed.initialize(
    model=small, optimizer=torch.optim.AdamW(small.parameters()),
    config={"train_micro_batch_size_per_gpu": 2, "zero_force_ds_cpu_optimizer": False,
            "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
cases = {"module": engine.module, "zero_optimizer": engine.optimizer, "offload": offloaded}
results = {}
for which, target in cases.items():
    store, log = os.path.join(sys.argv[1], which), io.StringIO()
    ck = Checkpointer(store, None, log=log)
    ck.register(state=target)
    ck.register_local(step={"n": 0})
    engine.backward(engine(torch.randn(2, 8)).sum())
    engine.step()
    results[which] = {"saved": ck.save(1), "restored": ck.restore(), "enabled": ck.enabled,
                      "files": sorted(os.listdir(store)) if os.path.isdir(store) else [],
                      "said": log.getvalue().splitlines()}
print("RESULT " + json.dumps(results), flush=True)
