"""The hang rules, as the collector's parts, tests and benches name them:
they live in the diag/hang package, one module per rule (docs/collector.md
"Passes and rules")."""

from diag.hang.api import MAX_GROUPS_EXPLAINED  # noqa: F401
from diag.hang.detector import HangDetector  # noqa: F401
from diag.hang.judge import analyse  # noqa: F401
from diag.hang.not_in_collective import EXITED, NOT_IN_ANY  # noqa: F401
from diag.hang.progress import comm_lane, in_flight_age  # noqa: F401
from diag.hang.silent import silent_agents  # noqa: F401
