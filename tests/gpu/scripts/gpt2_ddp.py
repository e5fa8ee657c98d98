"""What the GPT-2-small DDP scripts here share (ddp_skip_loss.py,
perf_gpt2_worker.py, slow_gpt2.py): this rank's GPU and NCCL group, GPT-2
small from a transformers config (random weights, seed 0) in DDP with AdamW,
random tokens, and one bf16-autocast training step. Imported as a sibling
module: torchrun puts the script's own folder first on sys.path."""
import os

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel


class Gpt2Ddp:
    """Joins the NCCL group on cuda:LOCAL_RANK and builds the model; ``tokens``
    is ``batch`` x ``positions`` (the model's context length)."""

    def __init__(self, batch: int, positions: int):
        self.local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(self.local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", self.local))
        self.rank = dist.get_rank()
        torch.manual_seed(0)
        self.model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=positions)).cuda()
        self.ddp = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=[self.local])
        self.opt = torch.optim.AdamW(self.ddp.parameters(), lr=1e-4)
        self.tokens = torch.randint(0, 50257, (batch, positions), device="cuda")

    def step(self) -> torch.Tensor:
        """Forward, backward (DDP all-reduces its buckets) and the optimizer
        step; returns the loss."""
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.ddp(self.tokens, labels=self.tokens).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss
