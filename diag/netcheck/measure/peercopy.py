"""Peer copy GPU i -> GPU j (through the switch or NVLink). busbw = algbw = S / t."""

from __future__ import annotations

import torch

from diag.netcheck.api import BandwidthTest, TestContext


class PeerCopy(BandwidthTest):
    name = "peer_copy"

    def setup(self, ctx: TestContext) -> None:
        self.ctx = ctx
        count = max(ctx.size_bytes // 4, 1)
        self.src = torch.ones(count, dtype=torch.float32, device=ctx.src_device)
        self.dst = torch.empty(count, dtype=torch.float32, device=ctx.dst_device)

    def bytes_moved(self, ctx: TestContext) -> int:
        return self.src.numel() * 4

    def run_once(self) -> None:
        # Queued on the destination's current stream; finish() syncs both ends.
        self.dst.copy_(self.src, non_blocking=True)

    def finish(self) -> None:
        torch.cuda.synchronize(self.ctx.src_device)
        torch.cuda.synchronize(self.ctx.dst_device)
