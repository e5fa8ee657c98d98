"""pauses.py's eval and compile cases hung for real, without torch
(torchless.py). There, rank 0 blocks for good before its first forward pass
or compile (its eval data, its compile worker never answer) while the others
wait in a barrier; here too, in functions of the same names, after the same
two steps. The evidence the rule reads is the same: rank 0 alive, no op in
flight, no CPU, I/O or kernel launch in its tree; the others in a collective.

    torchless_pauses.py eval|compile forever
"""
import sys, threading, time
import torchless as dist
PAUSE_AT = 2
case, pause = sys.argv[1], sys.argv[2]
def blocked_forever():   # no CPU, no I/O: a stalled mount, a lost lock
    dist.say(f"BLOCKED rank={dist.rank} {time.time()}"); threading.Event().wait()
def evaluate():
    if dist.rank == 0: blocked_forever()
    dist.barrier()
def compile_warmup():
    if dist.rank == 0: blocked_forever()
    dist.barrier()
if case not in ("eval", "compile") or pause != "forever": sys.exit(f"torchless_pauses.py: {case} {pause}: eval|compile forever only")
for step in range(PAUSE_AT + 1):
    if step == PAUSE_AT:
        dist.say(f"PAUSE rank={dist.rank} {case} {time.time()}")
        (evaluate if case == "eval" else compile_warmup)()
    dist.all_reduce(1.0)
