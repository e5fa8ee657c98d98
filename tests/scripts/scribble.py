import os, struct, sys, threading, time, torch, torch.distributed as dist   # rank 0 scribbles its region, rank 1 stalls
import exitlib
def scribble(ring, w0):   # once the agent read rank 0's all_reduce START: issue 33 item 5's garbage
    with open(ring, "r+b") as f:
        while (h := os.pread(f.fileno(), 136, 0))[64:72] != h[128:136] or h[64:72] == w0: time.sleep(0.01)
        f.seek(4096); f.write(b"\xff" * (os.path.getsize(ring) - 4096)); f.flush()
        os.pwrite(f.fileno(), struct.pack("<iii", 2**31 - 1, 0, -7), 28); os.pwrite(f.fileno(), struct.pack("<Q", 2**63 - 5), 64)
    os.write(1, f"SCRIBBLED {time.time()}\n".encode())
stall_s, e = float(sys.argv[1]), os.environ
dist.init_process_group("gloo")
rank, t, ring = dist.get_rank(), torch.ones(8), os.path.join(e["XPU_TIMER_SHM_DIR"], f"py-r0-p{os.getpid()}.ring")
for step in range(8):
    if rank == 0 and step == 4: threading.Thread(target=scribble, args=(ring, os.pread(os.open(ring, os.O_RDONLY), 8, 64))).start()
    if rank == 1 and step == 4: os.write(1, f"STALL {time.time()}\n".encode()); time.sleep(stall_s)
    dist.all_reduce(t); time.sleep(0.05)
os.write(1, f"DONE rank={rank} value={t[0].item():.0f}\n".encode())
exitlib.leave(dist)
