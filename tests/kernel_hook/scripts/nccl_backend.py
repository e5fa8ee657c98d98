"""A torch process-group backend that issues NCCL calls as ProcessGroupNCCL
does: dist.all_reduce (traced by the tracer) calls ncclAllReduce of the fake
libnccl through the global scope (so the preloaded hook records it too), on
a communicator whose unique id rank 0 shares through the store. Runs STEPS
all-reduces, then waits for STOP_FILE (the test scrapes /metrics meanwhile)."""
import ctypes
import os
import time

import torch
import torch.distributed as dist

ctypes.CDLL("libnccl.so.2", mode=ctypes.RTLD_GLOBAL)   # the fake, from LD_LIBRARY_PATH
lib = ctypes.CDLL(None)                                # its symbols as a linked torch binds them


class Done(dist.Work):
    def __init__(self, tensors):
        super().__init__()
        self.fut = torch.futures.Future()
        self.fut.set_result(tensors)

    def wait(self, timeout=None):
        return True

    def get_future(self):
        return self.fut


class FakeNccl(dist.ProcessGroup):
    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        uid = ctypes.create_string_buffer(128)
        if rank == 0:
            lib.ncclGetUniqueId(uid)
            store.set("fake-nccl-id", uid.raw)
        uid = ctypes.create_string_buffer(store.get("fake-nccl-id"), 128)
        self.comm, self.stream = ctypes.c_void_p(), ctypes.c_void_p()
        lib.cudaStreamCreate(ctypes.byref(self.stream))
        # ncclUniqueId goes by value: a 128-byte struct.
        lib.ncclCommInitRank(ctypes.byref(self.comm), size, type("Id", (ctypes.Structure,), {
            "_fields_": [("b", ctypes.c_char * 128)]})(uid.raw), rank)

    def allreduce(self, tensors, opts):
        t = tensors[0]
        lib.ncclAllReduce(None, None, ctypes.c_size_t(t.numel()), 7, 0, self.comm, self.stream)
        return Done(tensors)

    def getBackendName(self):
        return "fakenccl"


dist.Backend.register_backend("fakenccl", FakeNccl, devices=["cpu"])
dist.init_process_group("fakenccl")
grad = torch.ones(256 * 1024)   # 1 MiB of float32
for _ in range(int(os.environ.get("STEPS", "40"))):
    dist.all_reduce(grad)
    time.sleep(0.005)
lib.cudaDeviceSynchronize()
print(f"rank {dist.get_rank()} reduced", flush=True)
while not os.path.exists(os.environ["STOP_FILE"]):
    time.sleep(0.05)
