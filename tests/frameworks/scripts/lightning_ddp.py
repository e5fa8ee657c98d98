"""Lightning Trainer(strategy="ddp") on gloo (NCCL with --cuda); --stall: rank 1 stops in a callback."""
import time

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

import fwlib


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))

    def training_step(self, batch, _index):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class UserCallback(L.Callback):
    def on_train_start(self, trainer, module):
        # DDP's C++ reducer issues its all-reduces where the script cannot time
        # them; torch's stock Python hook issues the same ones through
        # torch.distributed. (Lightning registers comm hooks on CUDA only.)
        if fwlib.TIMED and not fwlib.CUDA:
            trainer.strategy.model.register_comm_hook(None, allreduce_hook)

    def on_train_batch_start(self, trainer, module, batch, index):
        if fwlib.should_stall(index):
            time.sleep(600)
        fwlib.pace(index)

    def on_train_batch_end(self, *_args):
        fwlib.step_done()


fwlib.time_collectives()
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(fwlib.STEPS * 16, 32), torch.randn(fwlib.STEPS * 16, 1))
model = Tiny()
trainer = L.Trainer(accelerator="gpu" if fwlib.CUDA else "cpu", devices=fwlib.WORLD,
                    strategy=DDPStrategy(process_group_backend=fwlib.BACKEND),
                    max_steps=fwlib.STEPS, callbacks=[UserCallback()], logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=8))
fwlib.save(model.parameters())
if fwlib.TIMED:
    # The timing's Python callbacks on gloo's futures would leave this exit
    # open to the race test_lightning_teardown.py looks for, under torchrun too.
    # --untimed exits as Lightning leaves it: the gloo group still up.
    torch.distributed.destroy_process_group()
