"""netcheck's NVML: the shared access layer (diag.gpu.nvml) with netcheck's
own one-line errors (NetcheckError, naming --nvml-replay).

Every NVML answer netcheck uses goes through ``Nvml.query(fn, *args)``; see
diag/gpu/nvml.py for the recording format, which the agent's GPU health
replays too.
"""

from __future__ import annotations

from diag.gpu import nvml as _gpu_nvml
from diag.gpu.api import GpuError
from diag.gpu.nvml import (  # noqa: F401 - netcheck's names for the shared layer
    FORMAT_VERSION,
    NVLINK_MAX_LINKS,
    XID_EVENT,
    Nvml,
    NvmlQueryError,
    RecordingNvml,
    key,
    try_query,
)
from diag.netcheck.api import NetcheckError


class RealNvml(_gpu_nvml.RealNvml):
    """pynvml on this machine. Raises NetcheckError (one line) if NVML cannot start."""

    def __init__(self) -> None:
        try:
            super().__init__()
        except GpuError as exc:
            raise NetcheckError(f"{exc}; the switchbox check needs the NVIDIA driver (or --nvml-replay FILE)") \
                from None


class ReplayNvml(_gpu_nvml.ReplayNvml):
    """Answers queries from a recorded file; a query never recorded raises NvmlQueryError."""

    def __init__(self, path: str):
        try:
            super().__init__(path)
        except GpuError as exc:
            raise NetcheckError(f"--nvml-replay: {exc}") from None
