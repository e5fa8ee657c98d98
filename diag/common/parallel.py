"""A rank's parallel coordinates, from the names frameworks give their groups.

Megatron-Core names its process groups (``group_desc``)
``TENSOR_MODEL_PARALLEL_GROUP``, ``PIPELINE_MODEL_PARALLEL_GROUP``, ... and
torch's DeviceMesh (torchtitan, FSDP2 + TP) ``mesh_<dim>``. A rank's index in
each such group is its coordinate on that axis: ``tp 1, pp 0, dp 3``. Groups
with other names (DeepSpeed's, a user's) give none.
"""

from __future__ import annotations

MEGATRON_AXES = {
    "TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "CONTEXT_PARALLEL_GROUP": "cp",
    "EXPERT_MODEL_PARALLEL_GROUP": "ep",
    "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "DATA_PARALLEL_GROUP": "dp",
}
MESH_PREFIX = "mesh_"
# Megatron's rank order (tp fastest), then the rest by name.
ORDER = ("tp", "cp", "ep", "pp", "dp")


def axis(group_name: str) -> str | None:
    """The axis a group is, by its name; None for a group no framework named."""
    found = MEGATRON_AXES.get(group_name)
    if found is None and group_name.startswith(MESH_PREFIX) and len(group_name) > len(MESH_PREFIX):
        found = group_name[len(MESH_PREFIX):]
    return found


def coords(places: dict[str, int]) -> str:
    """``{"TENSOR_MODEL_PARALLEL_GROUP": 1, "PIPELINE_MODEL_PARALLEL_GROUP": 0}``
    (group name -> the rank's index in it) -> ``"tp 1, pp 0"``; "" if none is named."""
    found = {}
    for name, index in places.items():
        a = axis(name)
        if a is not None and index >= 0:
            found[a] = index
    ordered = sorted(found, key=lambda a: (ORDER.index(a) if a in ORDER else len(ORDER), a))
    return ", ".join(f"{a} {found[a]}" for a in ordered)
