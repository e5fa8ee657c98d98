import torch, torch.distributed as dist
dist.init_process_group("gloo")  # 50 all_reduces, then teardown with no final barrier
t = torch.ones(4)
for _ in range(50):
    dist.all_reduce(t)
dist.destroy_process_group()
