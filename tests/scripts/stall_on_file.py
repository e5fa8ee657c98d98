import os, sys, time, torch, torch.distributed as dist
def wait_for_data(seconds):  # the stalled function the stacks must show
    time.sleep(seconds)
flag, stall_rank = sys.argv[1], int(sys.argv[2])   # rank stall_rank stalls once the file flag exists
dist.init_process_group("gloo"); rank, t = dist.get_rank(), torch.ones(8)
os.write(1, f"STARTED rank={rank}\n".encode())
while True:   # until the test ends the job
    if rank == stall_rank and os.path.exists(flag):
        os.write(1, f"STALL {time.time()}\n".encode()); wait_for_data(600)
    dist.all_reduce(t); time.sleep(0.05)
