"""State dicts <-> flat leaves <-> a slot's bytes.

A registered object's ``state_dict()`` is walked through its dicts (str and
int keys, as model and optimizer state dicts have); tensors become
:class:`api.TensorEntry` s placed one after another in the ``data`` region,
every other leaf (numbers, lists, param_groups) goes to the pickled objects.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterator

import torch

from diag.recover import api

try:
    from torch.distributed.tensor import DTensor
except ImportError:     # a torch without DTensor: nothing is sharded
    DTensor = ()


_NAMES: dict = {}


def dtype_name(dtype: torch.dtype) -> str:
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def dtype_of(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def leaves(tree: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(path, leaf) of a nested dict, dicts walked, everything else a leaf
    (an empty dict too: an optimizer's ``state`` before its first step)."""
    if isinstance(tree, dict) and (tree or not path):
        for key, value in tree.items():
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise TypeError(f"state dict key {key!r} at {path} is not a str or int")
            yield from leaves(value, path + (key,))
    else:
        yield path, tree


def local(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The tensor whose bytes are stored: a DTensor's local shard."""
    if DTensor and isinstance(t, DTensor):
        return t.to_local(), True
    return t, False


def split(tree: dict) -> tuple[list[tuple[tuple, torch.Tensor, bool]], list[tuple[tuple, Any]]]:
    """Tensor leaves (path, local tensor, was-DTensor) and object leaves, in
    :func:`leaves`' order. Iterative: it runs on the training thread at every
    save, over ~2000 leaves for GPT-2 with Adam."""
    tensors, objects = [], []
    stack = [((), tree)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict) and (node or not path):
            items = list(node.items())
            for key, _ in items:
                if type(key) not in (str, int):
                    raise TypeError(f"state dict key {key!r} at {path} is not a str or int")
            stack.extend((path + (key,), value) for key, value in reversed(items))
        elif isinstance(node, torch.Tensor):
            if DTensor and isinstance(node, DTensor):
                tensors.append((path, node.to_local(), True))
            else:
                tensors.append((path, node, False))
        else:
            objects.append((path, node))
    return tensors, objects


def place(tensors: list[tuple[tuple, torch.Tensor, bool]],
          aliases: tuple[int, ...] | None = None) -> tuple[tuple[api.TensorEntry, ...], int]:
    """Assign each tensor its aligned offset; returns the entries and the
    region's size (a multiple of api.ALIGN). ``aliases[k]`` is the index of
    the first tensor that is the same memory as tensor k (tied weights): it
    gets that one's offset, and its bytes are stored once."""
    entries, offset = [], 0
    for k, (path, t, is_d) in enumerate(tensors):
        nbytes = t.numel() * t.element_size()
        a = aliases[k] if aliases is not None else k
        at = entries[a].offset if a != k else offset
        entries.append(api.TensorEntry(path, dtype_name(t.dtype), tuple(t.shape), at, nbytes, is_d))
        if a == k:
            offset += -(-nbytes // api.ALIGN) * api.ALIGN
    return tuple(entries), offset


def views(buf, entries: tuple[api.TensorEntry, ...]) -> list[torch.Tensor]:
    """CPU tensors over ``buf`` (a writable bytes-like object), one per entry."""
    if not entries:
        return []
    whole = torch.frombuffer(buf, dtype=torch.uint8)
    out = []
    for e in entries:
        raw = whole[e.offset:e.offset + e.nbytes]
        out.append(raw.view(dtype_of(e.dtype)).view(e.shape) if e.nbytes else
                   torch.empty(e.shape, dtype=dtype_of(e.dtype)))
    return out


def word_sum(t: torch.Tensor) -> tuple[torch.Tensor | None, int]:
    """checksum.word_sum of a contiguous tensor's bytes, computed where the
    tensor lives (one reduction kernel on a GPU): (a 0-dim int64 tensor, the
    bytes it covers: a multiple of 8), the rest (< 8 bytes) left to the caller;
    (None, 0) where its bytes cannot be read as 64-bit words in place."""
    nbytes = t.numel() * t.element_size()
    whole = nbytes // 8 * 8
    if not whole or t.storage_offset() * t.element_size() % 8:
        return None, 0
    flat = t.view(-1)
    words = flat.view(torch.int64) if whole == nbytes else flat.view(torch.uint8)[:whole].view(torch.int64)
    return words.sum(), whole   # int64 wraps modulo 2**64, as the host's uint64 sum


def dump_objects(objects: list[tuple[tuple, Any]]) -> bytes:
    return pickle.dumps(objects, protocol=pickle.HIGHEST_PROTOCOL)


def load_objects(raw: bytes) -> list[tuple[tuple, Any]]:
    """The object leaves. The pickle was written by this job's own workers
    (the store is 0700, the persisted copy the job's own directory)."""
    return [(tuple(path), value) for path, value in pickle.loads(raw)]


def build(pairs) -> dict:
    """A nested dict from (path, value) pairs."""
    root: dict = {}
    for path, value in pairs:
        node = root
        for key in path[:-1]:
            node = node.setdefault(key, {})
        if path:
            node[path[-1]] = value
    return root
