import os, sys, time   # stall_on_file.py without torch (torchless.py)
import torchless as dist
def wait_for_data(seconds):  # the stalled function the stacks must show
    time.sleep(seconds)
flag, stall_rank = sys.argv[1], int(sys.argv[2])   # rank stall_rank stalls once the file flag exists
dist.say(f"STARTED rank={dist.rank}")
while True:   # until the test ends the job
    if dist.rank == stall_rank and os.path.exists(flag):
        dist.say(f"STALL {time.time()}"); wait_for_data(600)
    dist.all_reduce(1.0); time.sleep(0.05)
