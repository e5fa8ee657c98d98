import time, torch, torch.distributed as dist
import exitlib
dist.init_process_group("gloo")
model = torch.nn.Linear(4, 4)
opt = torch.optim.AdamW(model.parameters(), lr=0.1)
for _ in range(5):
    model(torch.randn(2, 4)).sum().backward()
    time.sleep(0.02)
    opt.step()
    opt.zero_grad()
print("RESULT", model.weight.sum().item() != 0, flush=True)
exitlib.leave(dist)
