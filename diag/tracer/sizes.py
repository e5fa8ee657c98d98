"""What a record says about a tensor: its bytes and its NCCL data type.

Read on every traced call by collectives.py, dispatch.py and functional.py,
each importing it once at module load (no per-call import); its own module so
those parts need not import each other.
"""

from __future__ import annotations

from diag.records import format as fmt

# torch dtype name -> NCCL data type number (nccl.h; bool travels as uint8).
_NCCL_DTYPES = {"int8": 0, "uint8": 1, "bool": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
                "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9, "float8_e4m3fn": 10,
                "float8_e5m2": 11}

# Per-call lookups are cached by the dtype object: one dict hit.
_flags_cache: dict = {}


def dtype_flags(value) -> int:
    """Record flags bits 8-15 for a tensor (or list of them): NCCL dtype + 1."""
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    dtype = getattr(value, "dtype", None)
    flags = _flags_cache.get(dtype)
    if flags is None:
        code = _NCCL_DTYPES.get(str(dtype).rpartition(".")[2], -1)
        flags = _flags_cache.setdefault(dtype, (code + 1) << fmt.FLAG_DTYPE_SHIFT)
    return flags


def tensor_bytes(value) -> int:
    if value is None:
        return 0
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    try:
        return value.numel() * value.element_size()
    except Exception:
        return 0
