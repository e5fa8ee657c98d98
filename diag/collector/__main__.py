import signal
import sys

from diag.common.children import die_with_launcher

# First: a collector whose launcher is already gone must not start serving.
die_with_launcher(signal.SIGTERM)
from diag.collector.server import main  # noqa: E402

sys.exit(main())
