import gc, time, torch, torch.distributed as dist
import exitlib
dist.init_process_group("gloo")
model = torch.nn.Linear(4, 4)
opt = torch.optim.AdamW(model.parameters(), lr=0.1)
for _ in range(5):
    t_step = time.monotonic(); model(torch.randn(2, 4)).sum().backward()
    junk = [[object() for _ in range(50)] for _ in range(20000)]   # a heap worth collecting
    t0 = time.monotonic(); gc.collect(); t1 = time.monotonic()
    del junk
    opt.step()
    print("GC_MS", 1e3 * (t1 - t0), 1e3 * (time.monotonic() - t_step), flush=True)
    opt.zero_grad()
exitlib.leave(dist)
