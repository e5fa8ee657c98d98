import gc, time, torch, torch.distributed as dist
import exitlib
dist.init_process_group("gloo")   # test_tracer's step records and gc records, both from this run
model = torch.nn.Linear(4, 4)
opt = torch.optim.AdamW(model.parameters(), lr=0.1)
for _ in range(5):
    time.sleep(0.02)   # a step lasts at least 20 ms; outside GC_MS's step time, which bounds the gc record
    t_step = time.monotonic(); model(torch.randn(2, 4)).sum().backward()
    junk = [[object() for _ in range(50)] for _ in range(20000)]   # a heap worth collecting
    t0 = time.monotonic(); gc.collect(); t1 = time.monotonic()
    del junk
    opt.step()
    print("GC_MS", 1e3 * (t1 - t0), 1e3 * (time.monotonic() - t_step), flush=True)
    opt.zero_grad()
exitlib.leave(dist)
