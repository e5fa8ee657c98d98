"""Restore: the newest step every rank has, from memory where the node kept
it, else from the persisted copy; DDP's replica broadcast from its holder.

Every rank lists what it has (verified store slots, complete persisted
copies), the ranks agree on the newest step in all their lists (one
all_gather_object), and each loads its own. Stored state from another world
size or another set of names is bad input: one line naming the file.
"""

from __future__ import annotations

import contextlib
import os
import time

import torch

from diag.common.ranks import fold
from diag.recover import api, layout, persist, store
from diag.recover.state import apply

_CHUNK = 256 << 20


def restore(ck, rank: int, world: int) -> api.RestoreResult:
    """See :meth:`Checkpointer.restore`. Raises :class:`api.RecoverError`."""
    t0 = time.perf_counter()
    expected = tuple(sorted(ck._names_kept(rank)))
    found = candidates(ck, rank, world, expected)
    step, lists = agree(sorted(found), ck.group, world)
    if step is None:
        if rank == 0 and any(lists):     # one line for the job, not one a rank
            ck._say(f"no step that every rank has ({who_has(lists)}); starting afresh")
        return api.RestoreResult(None, "none", None, time.perf_counter() - t0, 0)
    source, where, meta = found[step]
    if meta.world_size != world and rank == 0:
        ck._say(f"step {step} was saved by a job of world size {meta.world_size}; restoring its replicated "
                f"state into {world} rank(s) (ranks {world}-{meta.world_size - 1}'s own state, RNG and data "
                f"position, is not restored)")
    if source == "memory":
        ref = api.SlotRef(where, meta)
        with store.reading(ref, verify=False) as (data, objects):
            _apply_all(ck, rank, world, meta, data, objects, where)
    else:
        data, objects = persist.load_copy(where, meta)
        _apply_all(ck, rank, world, meta, data, objects, where)
    forget_newer(ck, rank, step)
    size = meta.data_bytes
    return api.RestoreResult(step, source, where, time.perf_counter() - t0, size)


def candidates(ck, rank: int, world: int, expected: tuple) -> dict[int, tuple[str, str, api.SnapshotMeta]]:
    """{step: (source, path, meta)} of what this rank can restore; memory
    preferred. Store slots are checksummed here (a bad one is named and left
    out); persisted copies when loaded."""
    found: dict[int, tuple[str, str, api.SnapshotMeta]] = {}
    if ck.persist_dir:
        for step, path in persist.copies(ck.persist_dir, rank, say=ck._say):
            meta = persist.read_manifest(path)
            check_fits(os.path.join(path, api.MANIFEST_FILE), meta, rank, world, expected, ck.persist_dir)
            found.setdefault(meta.step, ("disk", path, meta))
    if ck.store_dir:
        problems: list[str] = []
        for ref in store.committed(store.rank_dir(ck.store_dir, rank), problems):
            check_fits(os.path.join(ref.path, api.META_FILE), ref.meta, rank, world, expected, ck.store_dir)
            try:
                with store.reading(ref, verify=True):
                    pass
            except store.SlotBusy:
                continue
            except api.CorruptSnapshot as exc:
                problems.append(str(exc))
                continue
            if found.get(ref.meta.step, ("",))[0] != "memory":
                found[ref.meta.step] = ("memory", ref.path, ref.meta)
        for line in problems:
            ck._say(line)
    return found


def check_fits(name: str, meta: api.SnapshotMeta, rank: int, world: int, expected: tuple, root: str) -> None:
    # A smaller world restores a replicated (DDP) state: every replica is the
    # same, the holder's is broadcast, each remaining rank reads its own local
    # state (a node left out under --nnodes MIN:MAX). A shard is not a replica.
    if meta.world_size != world and meta.replicated and world < meta.world_size:
        return _check_rank_and_names(name, meta, rank, expected, root)
    if meta.world_size != world and not meta.replicated:
        raise api.RestoreMismatch(
            f"{name}: sharded state (FSDP2 / tensor parallel) written by a job of world size "
            f"{meta.world_size}, this one has {world}; restart with {meta.world_size} ranks, or reshard it: "
            f"dcp.load the persisted copies into the new sharding and start from them with an empty "
            f"directory (or remove {root})")
    if meta.world_size != world:
        raise api.RestoreMismatch(
            f"{name}: written by a job of world size {meta.world_size}, this one has {world}; "
            f"restart with {meta.world_size} ranks, or point the job at an empty directory "
            f"(or remove {root}) to start afresh")
    _check_rank_and_names(name, meta, rank, expected, root)


def _check_rank_and_names(name: str, meta: api.SnapshotMeta, rank: int, expected: tuple, root: str) -> None:
    if meta.rank != rank:
        raise api.RestoreMismatch(f"{name}: holds rank {meta.rank}'s state, read as rank {rank}; "
                                  f"remove {root} (the layout was changed by hand)")
    if tuple(meta.names) != expected:
        raise api.RestoreMismatch(
            f"{name}: holds {', '.join(meta.names) or 'nothing'}, this job registers "
            f"{', '.join(expected) or 'nothing'} on rank {rank}; register the same names "
            f"(and replicated=) as the job that saved it, or remove {root}")


def agree(steps: list[int], group, world: int) -> tuple[int | None, list[list[int]]]:
    """The newest step in every rank's list (collective when world > 1), and
    the lists, by rank."""
    import torch.distributed as dist
    if world <= 1 or not (dist.is_available() and dist.is_initialized()):
        return (max(steps) if steps else None), [steps]
    lists: list = [None] * world
    dist.all_gather_object(lists, steps, group=group)
    common = set(lists[0]).intersection(*map(set, lists[1:]))
    return (max(common) if common else None), lists


def who_has(lists: list[list[int]], most: int = 4) -> str:
    """The ranks' steps, ranks with the same steps folded, the most common
    first: "ranks 0-1,4 have [18, 20, 21]; ranks 2-3 have [15, 16]"; at most
    ``most`` groups, then how many more (thousands of ranks stay one line)."""
    groups: dict[tuple, list[int]] = {}
    for rank, steps in enumerate(lists):
        groups.setdefault(tuple(sorted(steps)), []).append(rank)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    parts = [f"{'rank' if len(ranks) == 1 else 'ranks'} {fold(ranks)} "
             f"{'has' if len(ranks) == 1 else 'have'} {list(steps) if steps else 'nothing'}"
             for steps, ranks in ordered[:most]]
    if len(ordered) > most:
        parts.append(f"{len(ordered) - most} more groups")
    return "; ".join(parts)


def _apply_all(ck, rank, world, meta, data, objects, where) -> None:
    tensors = layout.views(data, meta.tensors)
    pairs = list(zip((e.path for e in meta.tensors), tensors)) + layout.load_objects(objects)
    dtensors = {e.path for e in meta.tensors if e.dtensor}
    if ck.replicated and world > 1:
        _apply(ck, ck.local, pairs, dtensors, where)
        shared = _broadcast_shared(ck, rank, meta, data, objects)
        _apply(ck, ck.shared, shared[0], shared[1], where if rank == ck.holder else
               f"{where} (rank {ck.holder}'s replica)")
    else:   # the names this rank stored (check_fits: the ones it keeps)
        adapters = {n: a for n, a in {**ck.shared, **ck.local}.items() if n in meta.names}
        _apply(ck, adapters, pairs, dtensors, where)


def _apply(ck, adapters: dict, pairs, dtensors, where) -> None:
    for name, adapter in adapters.items():
        mine = [(p[1:], v) for p, v in pairs if p[0] == name]
        apply(adapter, name, mine, {p[1:] for p in dtensors if p[0] == name}, where)


def _broadcast_shared(ck, rank, meta, data, objects):
    """The holder's replicated state, sent to every rank of the group:
    returns (pairs, dtensor paths) of the shared names on every rank."""
    import torch.distributed as dist
    head = [None]
    if rank == ck.holder:
        head = [([e.to_json() for e in meta.tensors], objects, meta.data_bytes)]
    dist.broadcast_object_list(head, src=ck.holder, group=ck.group)
    raw_entries, raw_objects, nbytes = head[0]
    entries = tuple(api.TensorEntry.from_json(e) for e in raw_entries)
    device = _collective_device(ck.group)
    buf = bytearray(nbytes) if rank != ck.holder else data
    whole = torch.frombuffer(buf, dtype=torch.uint8) if nbytes else torch.empty(0, dtype=torch.uint8)
    for start in range(0, nbytes, _CHUNK):
        piece = whole[start:start + _CHUNK]
        moved = piece.to(device) if device.type != "cpu" else piece
        dist.broadcast(moved, src=ck.holder, group=ck.group)
        if moved is not piece:
            piece.copy_(moved)
    tensors = layout.views(buf, entries)
    pairs = list(zip((e.path for e in entries), tensors)) + layout.load_objects(raw_objects)
    names = set(ck.shared)
    return ([(p, v) for p, v in pairs if p[0] in names],
            {e.path for e in entries if e.dtensor and e.path[0] in names})


def _collective_device(group) -> torch.device:
    import torch.distributed as dist
    backend = str(dist.get_backend(group))
    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def forget_newer(ck, rank: int, step: int) -> None:
    """Drop this rank's snapshots newer than the restored step: they belong
    to a run that every rank did not reach, and must never be agreed on later."""
    if ck.store_dir:
        for ref in store.committed(store.rank_dir(ck.store_dir, rank)):
            if ref.meta.step > step:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(ref.path, api.META_FILE))
    if ck.persist_dir:
        for s, _, name in persist.walk_copies(ck.persist_dir, rank, say=ck._say):
            if s > step:
                persist.remove_copy(ck.persist_dir, name, rank, say=ck._say)
