"""The XPU_TIMER_HOST_TRACING_FUNC spec: module@object@function,...

Parsed here, below the tracer, so that the option registry (diag/common/options.py)
checks the launcher's value with the same parser the tracer uses, without
importing the tracer (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class HostFunc:
    module: str
    obj: str
    function: str

    @property
    def label(self) -> str:
        return f"{self.obj}.{self.function}" if self.obj else self.function


class HostFuncSpecError(ValueError):
    """A malformed XPU_TIMER_HOST_TRACING_FUNC entry; the message is user-facing."""


def parse_spec(text: str) -> list[HostFunc]:
    out = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        parts = item.split("@")
        if len(parts) != 3 or not parts[0] or not parts[2]:
            raise HostFuncSpecError(
                f"XPU_TIMER_HOST_TRACING_FUNC: {item!r} is not module@object@function "
                f"(object may be empty: module@@function)")
        out.append(HostFunc(*parts))
    return out
