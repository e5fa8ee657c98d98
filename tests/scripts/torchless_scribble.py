import os, struct, sys, threading, time   # scribble.py without torch (torchless.py)
import torchless as dist
def scribble(ring, w0):   # once the agent read rank 0's all_reduce START: issue 33 item 5's garbage
    with open(ring, "r+b") as f:
        while (h := os.pread(f.fileno(), 136, 0))[64:72] != h[128:136] or h[64:72] == w0: time.sleep(0.01)
        f.seek(4096); f.write(b"\xff" * (os.path.getsize(ring) - 4096)); f.flush()
        os.pwrite(f.fileno(), struct.pack("<iii", 2**31 - 1, 0, -7), 28); os.pwrite(f.fileno(), struct.pack("<Q", 2**63 - 5), 64)
    dist.say(f"SCRIBBLED {time.time()}")
stall_s, rank, t, ring = float(sys.argv[1]), dist.rank, 1.0, os.path.join(os.environ["XPU_TIMER_SHM_DIR"], f"py-r0-p{os.getpid()}.ring")
for step in range(8):
    if rank == 0 and step == 4: threading.Thread(target=scribble, args=(ring, os.pread(os.open(ring, os.O_RDONLY), 8, 64))).start()
    if rank == 1 and step == 4:   # the stall ends early once STALL_RELEASE (a file) exists
        dist.say(f"STALL {time.time()}"); end = time.monotonic() + stall_s
        while time.monotonic() < end and not os.path.exists(os.environ.get("STALL_RELEASE", "/nonexistent")): time.sleep(0.05)
    t = dist.all_reduce(t); time.sleep(0.05)
dist.say(f"DONE rank={rank} value={t:.0f}")
dist.leave()
