"""argv MB STEPS: snapshot a MB-sized tensor filled with the step, STEPS times (0: forever);
then print "restored S ok|bad" for what restore() finds first."""
import sys
import torch
from diag.recover import Checkpointer

mb, steps = int(sys.argv[1]), int(sys.argv[2])
state = {"w": torch.zeros(mb << 18), "step": 0}
ck = Checkpointer()
ck.register(state=state)
got = ck.restore()
print("restored", got, "ok" if got is None or bool((state["w"] == got).all()) else "bad", flush=True)
step = 0
while step < steps or steps == 0:
    step += 1
    state["w"].fill_(step), state.update(step=step)
    ck.save(step)
    ck.wait()
