"""All-reduce (sum) over the pair's group. busbw = algbw * 2(n-1)/n."""

from __future__ import annotations

import torch

from diag.common import busbw
from diag.netcheck.api import BandwidthTest, TestContext
from diag.netcheck.measure.timing import wait_work


class AllReduce(BandwidthTest):
    name = "all_reduce"

    def setup(self, ctx: TestContext) -> None:
        self.ctx = ctx
        self.count = max(ctx.size_bytes // 4, 1)
        # Zeros stay zeros under sum, so after any number of iterations every
        # element must still be 0 + rank-sum of the last fill: a cheap data check.
        self.buf = torch.zeros(self.count, dtype=torch.float32, device=ctx.device)
        self.runs = 0

    def bytes_moved(self, ctx: TestContext) -> int:
        return self.count * 4

    def bus_factor(self, nranks: int) -> float:
        return busbw.factor("all_reduce", nranks)

    def run_once(self) -> None:
        work = self.ctx.group.allreduce([self.buf])
        wait_work(work, self.ctx.timeout_s, f"all_reduce of {self.count * 4} bytes", self.ctx.device)
        self.runs += 1

    def finish(self) -> None:
        # nccl-tests exits non-zero on wrong data; a sum of zeros must be zero.
        if self.runs and (self.buf[0].item() != 0 or self.buf[-1].item() != 0):
            raise RuntimeError("all_reduce returned wrong data")
