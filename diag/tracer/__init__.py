"""The Python tracer: records torch.distributed ops and named host functions.

The launcher injects it into every worker through a ``sitecustomize`` bootstrap
(diag/launcher/bootstrap/); :func:`install_from_env` is what that calls. Records
go to the per-rank progress region described in docs/records.md.
"""

from diag.tracer.core import Tracer, install_from_env  # noqa: F401
