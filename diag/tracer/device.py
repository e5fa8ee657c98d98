"""Which CUDA device this rank runs on, asked where the work runs (docs/gpu.md).

The tracer writes one DEVICE record (docs/records.md) per CUDA device the
rank uses, on the first of: ``torch.cuda.set_device(d)`` returning, the first
collective on a CUDA tensor (the device NCCL runs on), or an explicit
:func:`use_device` (frameworks that do neither). The CUDA runtime's UUID and
PCI address come from ``torch.cuda.get_device_properties`` where this torch
has them; the agent resolves the rest through NVML, by the
``CUDA_VISIBLE_DEVICES`` entry when the runtime gave neither.

Nothing here raises into training code, and once a device is known the
collective path costs one attribute test.
"""

from __future__ import annotations

import functools
import os
import sys

from diag.records import format as fmt
from diag.tracer import current

MAX_DEVICES = 16            # a rank that touches more than this says the first 16
GIVE_UP_AFTER = 1000        # collectives on CPU tensors before the tensor check stops looking

_said: set[int] = set()
_looked = 0
# Read by collectives.py on every call: True once a CUDA device was said, or
# after GIVE_UP_AFTER CPU-only collectives (a gloo job: stop looking).
settled = False


def use_device(ordinal: int) -> None:
    """Tell xpu-diag this rank runs on CUDA device ``ordinal`` (as this process
    numbers them). Needed only where neither torch.cuda.set_device nor a
    collective on a CUDA tensor says it. Never raises."""
    tracer = current.tracer
    if tracer is None or not tracer.enabled:
        return
    try:
        _say(tracer, int(ordinal))
    except Exception as exc:   # never into training code
        sys.stderr.write(f"xpu-diag tracer (rank {tracer.rank}): cannot name CUDA device {ordinal}: {exc!r}\n")


def from_tensor(tracer, tensor) -> None:
    """Called on a collective until ``settled``: the device its tensor lives on."""
    global _looked, settled
    while isinstance(tensor, (list, tuple)) and tensor:
        tensor = tensor[0]
    device = getattr(tensor, "device", None)
    if device is None or getattr(device, "type", "") != "cuda":
        _looked += 1
        settled = _looked >= GIVE_UP_AFTER
        return
    _say(tracer, device.index if device.index is not None else _current())


def install(tracer, cuda_module) -> None:
    """Wrap torch.cuda.set_device: the device is said after the real call returns."""
    original = getattr(cuda_module, "set_device", None)
    if original is None or getattr(original, "_xpu_diag", False):
        return

    @functools.wraps(original)
    def set_device(device):
        result = original(device)
        if tracer.enabled:
            try:
                _say(tracer, _current())
            except Exception as exc:
                tracer.disable(f"naming the CUDA device failed: {exc!r}")
        return result

    set_device._xpu_diag = True
    cuda_module.set_device = set_device


def _current() -> int:
    import torch
    return torch.cuda.current_device()


def _say(tracer, ordinal: int) -> None:
    global settled
    if ordinal in _said or len(_said) >= MAX_DEVICES or ordinal < 0:
        return
    _said.add(ordinal)
    settled = True
    uuid, pci = runtime_identity(ordinal)
    tracer.writer.device(ordinal, visible_entry(ordinal), uuid, pci)


def visible_entry(ordinal: int, env=os.environ) -> str:
    """The CUDA_VISIBLE_DEVICES entry CUDA maps ``ordinal`` to ("" when unset)."""
    entries = [e.strip() for e in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if e.strip()]
    return entries[ordinal] if 0 <= ordinal < len(entries) else ""


def runtime_identity(ordinal: int) -> tuple[str, int | None]:
    """(UUID, packed PCI address) from the CUDA runtime through torch, where
    this torch exposes them (uuid: torch >= 2.2; pci_*_id: newer); ("", None)
    when CUDA is not available here."""
    try:
        import torch
        if not torch.cuda.is_available():
            return "", None
        props = torch.cuda.get_device_properties(ordinal)
    except Exception:
        return "", None
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid and not uuid.upper().startswith(("GPU-", "MIG-")):
        uuid = "GPU-" + uuid
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    pci = fmt.pack_pci(*parts) if all(isinstance(p, int) for p in parts) else None
    return uuid, pci


def _forget() -> None:
    """A forked child starts afresh (its tracer is off anyway)."""
    global _looked, settled
    _said.clear()
    _looked, settled = 0, False
