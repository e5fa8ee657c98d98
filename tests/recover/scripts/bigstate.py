"""argv MB STEPS: print "restored S ok|bad" for what restore() finds, then snapshot a
MB-sized tensor filled with the step, up to step STEPS (0: forever)."""
import sys
import torch
from diag.recover import Checkpointer

mb, steps = int(sys.argv[1]), int(sys.argv[2])
state = {"w": torch.zeros(mb << 18), "step": 0}
ck = Checkpointer()
ck.register(state=state)
got = ck.restore()
print("restored", got, "ok" if got is None or bool((state["w"] == got).all()) else "bad", flush=True)
step = got or 0
while step < steps or steps == 0:
    step += 1
    state["w"].fill_(step), state.update(step=step)
    ck.save(step)
    ck.wait()
