"""Per-rank progress records in shared memory (format: docs/records.md)."""

from diag.records.format import (  # noqa: F401
    EVENT_COUNT,
    EVENT_END,
    EVENT_START,
    KIND_COLLECTIVE,
    KIND_GEMM,
    KIND_HOST_FUNC,
    KIND_KERNEL,
    KIND_P2P,
    PRODUCER_HOOK,
    PRODUCER_PYTHON,
    Header,
    Record,
    RecordFormatError,
)
