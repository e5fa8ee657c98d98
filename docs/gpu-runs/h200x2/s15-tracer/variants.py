import os, sys, runpy, time
mode = os.environ.get("EXP", "")
from diag.tracer import completion
C = completion.Completions
if mode == "noadd":
    C.add = lambda self, record, works, on_cpu: self.tracer.finish(record)
elif mode == "nothread":
    C._run = lambda self: None
elif mode == "nocallback":
    import torch.futures
    torch.futures.Future.add_done_callback = lambda self, fn: None
elif mode == "nodispatch":
    from diag.tracer import dispatch
    dispatch.install = lambda t, g: None
elif mode == "nowaithook":
    completion._hook_work_wait = lambda: None
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
