"""HF Trainer (DDP on gloo; on one GPU with --cuda), a tiny GPT-2 from a config on random tokens; --stall: rank 1 stops in the collator."""
import time

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

import fwlib

batches = 0


def collate(examples):
    global batches
    if fwlib.should_stall(batches):
        time.sleep(600)
    fwlib.pace(batches)
    batches += 1
    ids = torch.stack([e["input_ids"] for e in examples])
    return {"input_ids": ids, "labels": ids}


class Timing(TrainerCallback):
    def on_train_begin(self, *_args, **_kwargs):
        # DDP's C++ reducer issues its all-reduces where the script cannot time
        # them; torch's stock Python hook issues the same ones through torch.distributed.
        if hasattr(trainer.model_wrapped, "register_comm_hook"):   # not wrapped at world size 1
            trainer.model_wrapped.register_comm_hook(None, allreduce_hook)

    def on_step_end(self, *_args, **_kwargs):
        fwlib.step_done()


fwlib.time_collectives()
torch.manual_seed(0)
tokens = torch.randint(0, 128, (fwlib.STEPS * 8, 16))
config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=16, bos_token_id=0,
                    eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
args = TrainingArguments(output_dir=f"{fwlib.OUT}/hf", max_steps=fwlib.STEPS, per_device_train_batch_size=4,
                         learning_rate=1e-3, seed=0, use_cpu=not fwlib.CUDA, ddp_backend=fwlib.BACKEND, save_strategy="no",
                         logging_strategy="no", report_to=[], disable_tqdm=True, dataloader_num_workers=0,
                         ddp_find_unused_parameters=False)
trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=[{"input_ids": t} for t in tokens],
                  data_collator=collate, callbacks=[Timing()])
trainer.train()
fwlib.save(trainer.model.parameters())
# The Trainer leaves the group up; the timing's Python callbacks on gloo's futures
# would leave the exit open to the race test_lightning_teardown.py looks for.
fwlib.leave()
