"""argv MB STEPS: a parameter of MB MiB that SGD raises by 1 a step (so its
value is the step), registered with its optimizer, a snapshot every step and
no ck.wait() in the loop: on CPU the copy (and its checksum) takes longer
than the step, so the background thread is always behind. Prints "restored S
ok|bad" for what restore() finds, then "saved N" after each save(N), up to
step STEPS (0: forever)."""
import sys
import torch
from diag.recover import Checkpointer

mb, steps = int(sys.argv[1]), int(sys.argv[2])
model = torch.nn.Module()
model.w = torch.nn.Parameter(torch.zeros(mb << 18))
opt = torch.optim.SGD(model.parameters(), lr=1.0)
ck = Checkpointer()
ck.register(model=model, optim=opt)
got = ck.restore()
ok = got is None or bool((model.w.detach() == got).all())
print("restored", got, "ok" if ok else "bad", flush=True)
step = got or 0
model.w.grad = torch.full_like(model.w, -1.0)
while step < steps or steps == 0:
    opt.step()            # the pre-hook: the copy of the previous snapshot is done first (CPU)
    step += 1
    ck.save(step)
    print("saved", step, flush=True)
ck.close()
