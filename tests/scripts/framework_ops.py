"""The collectives Megatron-Core, DeepSpeed and torchtitan issue, on gloo
(torchtitan's through torch's functional collectives).

Each op is issued async where the frameworks issue it so, and the peer
(rank 1) holds back ``DELAY_S`` before its side of the ops marked late: the
waiting rank's END must come from the op's real completion, not its call.
Prints RESULT with every tensor the ops produced (compared traced against
untraced by the test).
"""
import json
import sys
import time

import torch
import torch.distributed as dist

import exitlib

DELAY_S = float(sys.argv[1]) if len(sys.argv) > 1 else 0.6
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
tp = dist.new_group(list(range(world)), group_desc="TENSOR_MODEL_PARALLEL_GROUP")
peer = 1 - rank


def late():
    if rank == 1:
        time.sleep(DELAY_S)


base = torch.arange(8.0) + rank
out = {}

# Pipeline exchange: Megatron's p2p_communication (batch_isend_irecv).
late()
recv = torch.zeros(8)
for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, base.clone(), peer, tp),
                                 dist.P2POp(dist.irecv, recv, peer, tp)]):
    w.wait()
out["batch_isend_irecv"] = recv.tolist()

# Megatron's distributed optimizer: grads reduce-scattered and params
# all-gathered in buckets under the coalescing manager.
late()
shard = torch.zeros(4)
gathered = torch.zeros(16)
with dist._coalescing_manager(group=tp, async_ops=True) as cm:
    dist.reduce_scatter_tensor(shard, base.clone(), group=tp)
cm.wait()
with dist._coalescing_manager(group=tp, async_ops=True) as cm:
    dist.all_gather_into_tensor(gathered, base.clone(), group=tp)
cm.wait()
out["coalesced reduce_scatter_tensor"], out["coalesced all_gather_into_tensor"] = shard.tolist(), gathered.tolist()

# FSDP2 / ZeRO-3: the same ops on their own, async.
late()
gathered = torch.zeros(16)
dist.all_gather_into_tensor(gathered, base.clone(), group=tp, async_op=True).wait()
shard = torch.zeros(4)
dist.reduce_scatter_tensor(shard, base.clone(), group=tp, async_op=True).wait()
out["all_gather_into_tensor"], out["reduce_scatter_tensor"] = gathered.tolist(), shard.tolist()

# Expert parallelism (torchtitan, Megatron MoE): token exchange.
late()
exchanged = torch.zeros(8)
dist.all_to_all_single(exchanged, base.clone(), group=tp, async_op=True).wait()
out["all_to_all_single"] = exchanged.tolist()

# Megatron's tensor-parallel layers: overlapped async all-reduces, waited later.
late()
parts = [base.clone() * (i + 1) for i in range(4)]
works = [dist.all_reduce(p, group=tp, async_op=True) for p in parts]
for w in works:
    w.wait()
out["all_reduce"] = [p.tolist() for p in parts]

# A metric reduced with grad on: the call still goes through autograd.
x = torch.ones(4, requires_grad=True)
y = x * (rank + 1)
dist.all_reduce(y, group=tp)
y.sum().backward()
out["grad through all_reduce"] = [y.tolist(), x.grad.tolist()]

# torchtitan's tensor parallelism, DTensor and compiled graphs: functional
# collectives, waited on at first use (AsyncCollectiveTensor).
from torch.distributed import _functional_collectives as funcol  # noqa: E402

late()
reduced = funcol.all_reduce(base.clone(), "sum", tp)
gathered = funcol.all_gather_tensor(base.clone(), 0, tp)
scattered = funcol.reduce_scatter_tensor(base.clone(), "sum", 0, tp)
out["functional"] = [reduced.tolist(), gathered.tolist(), scattered.tolist()]

print("RESULT", json.dumps(out, sort_keys=True), flush=True)
exitlib.leave(dist)
