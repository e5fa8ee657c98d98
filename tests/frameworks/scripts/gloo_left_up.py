"""Ends as Lightning's DDP job does on gloo: the group left up, a normal
exit. Says who destroys the group (DESTROYED AT EXIT <rank>: once this
file's last line ran). Its one collective is a sync one from Python, whose END
is written before it returns: nothing is pending at exit. With ``--ddp`` the
last thing it does is DDP's backward, whose bucket all-reduce C++ issues: the
job exits a moment after it completes, before any look has seen it done."""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if "--ddp" in sys.argv:
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    model(torch.ones(2, 4)).sum().backward()
else:
    dist.all_reduce(torch.ones(4))
plain, ended = dist.destroy_process_group, []
dist.destroy_process_group = lambda *a, **k: (   # one write: the ranks share stdout
    os.write(1, f"DESTROYED {'AT EXIT' if ended else 'IN MAIN'} {dist.get_rank()}\n".encode()), plain(*a, **k))[1]
ended.append(True)
