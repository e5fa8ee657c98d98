"""One GPT-2 training step, in a module so the tracer can time it as a host
function (XPU_TIMER_HOST_TRACING_FUNC=timeline_step@@train_step)."""
import torch


def train_step(ddp, opt, tokens):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = ddp(tokens, labels=tokens).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()   # the step's CPU span then covers its device work
