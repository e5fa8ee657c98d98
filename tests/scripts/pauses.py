"""A healthy job that pauses, or the same job hung for real (issue 36).

    pauses.py CASE[,CASE...] SECONDS|forever

Two or more gloo ranks train a small DDP model; from step PAUSE_AT on, one
case pauses each step for SECONDS, then training goes on. With ``forever``
the (first) pause never ends: the job is hung, the way such jobs hang.

- save:    rank 0 torch.save()s a checkpoint into a throttled file (its bytes
           trickle out over SECONDS) while the others wait in the next
           all-reduce. Hung: the write stalls (a mount that stopped answering).
- dcp:     every rank saves with torch.distributed.checkpoint; rank 0's files
           are throttled, the others wait in DCP's own collectives. Hung:
           rank 0's write stalls.
- eval:    rank 0 evaluates (forward passes, no grad) for SECONDS while the
           others wait in a barrier. Hung: its eval data never comes.
- compile: rank 0 compiles and runs a torch.compile'd function (its warm-up)
           while the others wait in a barrier. Hung: the warm-up waits on a
           compile worker that never answers.
- loader:  rank 0's data-loader workers take SECONDS to start (their init
           indexes a dataset) while the others wait in the next all-reduce.
           Hung: a worker's init blocks (a lock, a mount).
- sleep:   every rank sleeps in user code for SECONDS between steps. Hung:
           every rank blocks for good.
"""
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import exitlib

PAUSE_AT = 2
cases, pause = sys.argv[1].split(","), sys.argv[2]
FOREVER = pause == "forever"
SECONDS = 0.0 if FOREVER else float(pause)
CKPT_BYTES = 16 << 20


def blocked_forever():
    """No CPU, no I/O, no kernels: what a stalled mount or a lost lock looks like."""
    os.write(1, f"BLOCKED rank={dist.get_rank()} {time.time()}\n".encode())
    threading.Event().wait()


class Throttled:
    """A file whose writes trickle out at a rate that takes about SECONDS for
    CKPT_BYTES: a checkpoint directory on slow storage, as the process sees it
    (its bytes move, a chunk at a time)."""

    CHUNK = 256 << 10

    def __init__(self, path, mode="wb"):
        self._f = open(path, mode)
        self._owed = 0.0     # seconds of throttling owed for the bytes written so far
        self._written = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        for i in range(0, len(view), self.CHUNK):
            if FOREVER and self._written:
                blocked_forever()     # the storage stopped answering after the first bytes
            piece = view[i:i + self.CHUNK]
            self._f.write(piece)
            self._f.flush()
            self._written += len(piece)
            self._owed += SECONDS * len(piece) / CKPT_BYTES
            if self._owed >= 0.05:    # small writes (DCP's) pay in batches, not a sleep each
                time.sleep(self._owed)
                self._owed = 0.0
        return len(view)

    def __getattr__(self, name):   # tell, seek, flush, fileno ... as the real file
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def save(model, rank, out):
    if rank == 0:
        with Throttled(os.path.join(out, "ckpt.pt")) as f:
            torch.save({"model": model.state_dict(), "blob": torch.zeros(CKPT_BYTES // 4)}, f)


def dcp_save(model, rank, out):
    import contextlib

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemWriter

    class SlowFS(FileSystem):
        @contextlib.contextmanager
        def create_stream(self, path, mode):
            if "w" not in mode:
                with super().create_stream(path, mode) as stream:
                    yield stream
                return
            with Throttled(path, mode) as stream:
                yield stream

    writer = FileSystemWriter(os.path.join(out, "dcp"))
    if rank == 0:
        writer.fs = SlowFS()
    # each rank its own tensor: a replicated one would be written by one rank, maybe not rank 0
    state = {"model": model.state_dict(), f"blob{rank}": torch.zeros(CKPT_BYTES // 4)}
    dcp.save(state, storage_writer=writer)


def evaluate(model, rank, out):
    if rank == 0:
        if FOREVER:
            blocked_forever()
        net = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
        x = torch.randn(64, 512)
        end = time.monotonic() + SECONDS
        with torch.no_grad():
            while time.monotonic() < end:
                net(x)
    dist.barrier()


def compile_warmup(model, rank, out):
    if rank == 0:
        if FOREVER:
            blocked_forever()

        # Warm-up from scratch, again and again, for SECONDS: what a large
        # model's first compile is (its length on this tiny one is seconds).
        end, n = time.monotonic() + SECONDS, 0
        while True:
            torch._dynamo.reset()

            @torch.compile
            def scaled(x):
                return torch.nn.functional.gelu(x * 2.0 + 1.0).sum(dim=0)
            n += 1
            scaled(torch.randn(32 + n, 16))
            if time.monotonic() >= end:
                break
    dist.barrier()


def _index_dataset(worker_id):   # a worker's slow start: indexing, hashing files
    if FOREVER:
        threading.Event().wait()
    end = time.monotonic() + SECONDS
    n = 0
    while time.monotonic() < end:
        n = hash((n, worker_id))


def loader(model, rank, out):
    data = torch.utils.data.TensorDataset(torch.randn(8, 8))
    if rank == 0:
        for (x,) in torch.utils.data.DataLoader(data, batch_size=4, num_workers=2, worker_init_fn=_index_dataset):
            pass


def sleep(model, rank, out):
    if FOREVER:
        blocked_forever()
    time.sleep(SECONDS)


PAUSES = {"save": save, "dcp": dcp_save, "eval": evaluate, "compile": compile_warmup, "loader": loader,
          "sleep": sleep}


def main():
    for case in cases:
        if case not in PAUSES:
            sys.exit(f"pauses.py: unknown case {case!r}; one of {', '.join(PAUSES)}")
    out = os.environ.get("PAUSES_OUT", "/tmp")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(PAUSE_AT + len(cases) + 2):
        if PAUSE_AT <= step < PAUSE_AT + len(cases):
            case = cases[step - PAUSE_AT]
            os.write(1, f"PAUSE rank={rank} {case} {time.time()}\n".encode())
            PAUSES[case](model, rank, out)
            os.write(1, f"RESUMED rank={rank} {case} {time.time()}\n".encode())
        loss = model(torch.ones(4, 8) * (rank + 1)).square().sum()
        loss.backward()
        opt.step(), opt.zero_grad()
    os.write(1, f"DONE rank={rank} {sum(p.sum().item() for p in model.parameters()):.6f}\n".encode())
    exitlib.leave(dist)


if __name__ == "__main__":   # DataLoader workers import this module: main() only in the rank
    main()
