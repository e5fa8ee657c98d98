"""How a tracer wrapper is marked and named, for every part that patches a
torch or user function (collectives, completion, host functions).

Its own module so those parts need not import each other (docs/architecture.md,
"Layers": no import cycle inside a package).
"""

from __future__ import annotations

# The attribute a wrapper keeps its original under: unpatch() puts it back, and
# a second patch() sees it and leaves the wrapper alone.
MARK = "__xpu_diag_original__"


def rename(wrapper):
    """Name the wrapper's frame so that stack dumps say who added it."""
    code = wrapper.__code__
    wrapper.__code__ = code.replace(co_name="xpu_diag_traced",
                                    **({"co_qualname": "xpu_diag_traced"}
                                       if hasattr(code, "co_qualname") else {}))
    return wrapper
