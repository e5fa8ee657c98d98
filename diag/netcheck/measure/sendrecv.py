"""Send/recv: each rank sends S bytes to its peer and receives S at once.

busbw = algbw (nccl-tests' sendrecv); both directions run concurrently, so
a link that is slow one way shows here even when all-reduce hides it.
"""

from __future__ import annotations

import torch

from diag.netcheck.api import BandwidthTest, TestContext
from diag.netcheck.measure.timing import wait_work


class SendRecv(BandwidthTest):
    name = "sendrecv"

    def setup(self, ctx: TestContext) -> None:
        if ctx.peer is None:
            raise ValueError("sendrecv needs a peer rank")
        self.ctx = ctx
        count = max(ctx.size_bytes // 4, 1)
        self.out = torch.full((count,), float(ctx.rank + 1), dtype=torch.float32, device=ctx.device)
        self.inp = torch.zeros(count, dtype=torch.float32, device=ctx.device)
        self.nccl = ctx.device.type == "cuda"
        self.coalesce = True

    def bytes_moved(self, ctx: TestContext) -> int:
        return self.out.numel() * 4

    def run_once(self) -> None:
        group, peer, what = self.ctx.group, self.ctx.peer, f"sendrecv of {self.out.numel() * 4} bytes"
        if self.nccl and self.coalesce:
            # NCCL needs send+recv in one group call, or both sides block in send.
            try:
                group._start_coalescing()       # a bare Backend's binding takes no device
                group.send([self.out], peer, 0)
                group.recv([self.inp], peer, 0)
                works = [group._end_coalescing()]
            except (AttributeError, RuntimeError, TypeError):
                self.coalesce = False      # this torch cannot coalesce on a bare backend
                return self.run_once()
        elif self.nccl:
            # Half duplex fallback, ordered by rank so neither side blocks in send.
            first, second = ((group.send, self.out), (group.recv, self.inp))
            if self.ctx.rank == 1:
                first, second = second, first
            works = []
            for op, buf in (first, second):
                work = op([buf], peer, 0)
                wait_work(work, self.ctx.timeout_s, what, self.ctx.device)
        else:
            works = [group.send([self.out], peer, 0), group.recv([self.inp], peer, 0)]
        for work in works:
            wait_work(work, self.ctx.timeout_s, what, self.ctx.device)

    def finish(self) -> None:
        expect = float(self.ctx.peer + 1)
        if self.inp[0].item() not in (0.0, expect) or self.inp[-1].item() not in (0.0, expect):
            raise RuntimeError("sendrecv received wrong data")
